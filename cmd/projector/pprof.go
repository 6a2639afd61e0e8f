//go:build pprof

package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

// A profiling build (go build -tags pprof) serves net/http/pprof on JETBUS_PPROF_ADDR.
func init() {
	if addr := os.Getenv("JETBUS_PPROF_ADDR"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
