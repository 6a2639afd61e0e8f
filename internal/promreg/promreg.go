// Package promreg holds jetbus's rules for registering Prometheus collectors, used by every
// package that registers its metrics on a caller's prometheus.Registerer: Register (register,
// or reuse the identical collector already registered: several Buses, feeds, projections or
// Servers in one process share one family) and Replace (register, replacing the identical
// collector already registered: a collector whose values come from a closure over the state
// of the latest setup).
//
// The libraries (every package outside cmd/, examples/, e2e/, bench/ and internal/) may
// import only the internal packages that hold such shared rules with no process in them:
// internal/promreg, internal/retry, internal/jsonenc, internal/streamscan, internal/mongoname,
// internal/option, internal/spans and internal/streamcfg. The process-level packages
// (internal/config, internal/ops, internal/process, internal/cli, internal/wiring,
// internal/tracing, internal/devenv, internal/devmode) import
// the libraries, never the other way round (the root package's
// TestLibrariesImportOnlyLibraryInternals; docs/architecture.md, "Internal packages").
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers *c with r. When r holds already a collector with the same descriptors
// (prometheus.AlreadyRegisteredError) and of the same type, *c is set to that collector and
// Register returns nil, so that the callers share one family. A collector with the same
// descriptors but of another type is an error, as is any other refusal (a family of the same
// name registered with other labels or help, an invalid collector). A nil r registers
// nothing and leaves *c as it is.
func Register[C prometheus.Collector](r prometheus.Registerer, c *C) error {
	if r == nil {
		return nil
	}
	err := r.Register(*c)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return err
	}
	ex, ok := are.ExistingCollector.(C)
	if !ok {
		return fmt.Errorf("promreg: a collector of another type (%T, not %T) is registered: %w", are.ExistingCollector, *c, err)
	}
	*c = ex
	return nil
}

// Replace registers c with r, unregistering first the collector with the same descriptors
// that r holds already: for a collector computed when scraped (prometheus.GaugeFunc and the
// like) whose function reads the state of the latest setup, such as a setup retried in the
// same process. A nil r registers nothing.
func Replace(r prometheus.Registerer, c prometheus.Collector) error {
	if r == nil {
		return nil
	}
	err := r.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		r.Unregister(are.ExistingCollector)
		err = r.Register(c)
	}
	return err
}
