package wiring

import "errors"

// ErrUnknownProjection is returned by Tool.Rebuild for a name no projection is declared with.
var ErrUnknownProjection = errors.New("unknown projection")
