package ingress

import (
	"errors"
	"fmt"

	"github.com/jetbus/jetbus"
)

// Sentinel errors of package ingress. What ingress refuses from clients is not an error of
// this package: it is answered with a code (see Code) or dead-lettered.
var (
	// ErrInvalidConfig is returned by Config.Validate and New for a Config field out of range;
	// the message names the field. It wraps jetbus.ErrInvalidConfig.
	ErrInvalidConfig = fmt.Errorf("ingress: %w", jetbus.ErrInvalidConfig)
	// ErrSharedConn is returned by New and Run when the service connection already has
	// subscriptions: ingress needs a connection of its own (see New).
	ErrSharedConn = errors.New("ingress: the service connection has subscriptions of others")
)
