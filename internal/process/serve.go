package process

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Serve serves srv on ln until ctx is done, then shuts it down: no new connections, and the
// requests in flight get at most drain to finish before their connections are closed. It
// returns nil after a shutdown, or the error that stopped the server before ctx ended. It is
// the one serve-and-drain loop of the processes' HTTP servers.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, drain time.Duration) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
