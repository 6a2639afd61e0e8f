//go:build !dev

package devmode

const available = false

// Start returns ErrNotBuilt: this is a production build.
func Start(Config) (Env, error) { return nil, ErrNotBuilt }
