//go:build !long

package ingress_test

import "time"

const (
	floodDuration = 5 * time.Second
	floodValid    = 5000
)
