//go:build long

package ingress_test

import "time"

const (
	floodDuration = 30 * time.Second
	floodValid    = 20000
)
