// Package devmode is the binaries' --dev flag: it starts the embedded NATS server (JetStream
// stored under a directory) and the MongoDB test backend in the process, listening where the
// configuration says NATS and MongoDB are (loopback only).
//
// The embedded servers are linked only into dev builds (build tag dev: `make dev`, or
// `go build -tags dev`): a production binary answers --dev with ErrNotBuilt and contains
// neither nats-server nor the test backend (a test on the import graph checks it).
package devmode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
)

// ErrNotBuilt is returned by Start in a production build.
var ErrNotBuilt = errors.New("--dev needs a dev build, which links the embedded NATS server and the MongoDB test backend: run `make dev`, or build with `go build -tags dev ./cmd/...`")

// Config says where the embedded servers listen and store.
type Config struct {
	// Dir holds JetStream's store and the MongoDB test backend's data (<Dir>/mongo); default "data".
	Dir string
	// NATSURL is where NATS should listen, e.g. nats://127.0.0.1:4222 (loopback only).
	NATSURL string
	// MongoURI is where MongoDB should listen, e.g. mongodb://127.0.0.1:27017 (loopback).
	MongoURI string
	// Logger nil discards.
	Logger *slog.Logger
}

// Env is the running dev environment.
type Env interface {
	// NATSURL and MongoURI are the URLs clients connect to.
	NATSURL() string
	MongoURI() string
	// Close stops both servers.
	Close() error
}

// Available reports whether this build has dev mode.
func Available() bool { return available }

// listenAddr returns the loopback host:port of a URL.
func listenAddr(raw, what, defPort string) (host string, port int, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", 0, fmt.Errorf("--dev: %s %q is not a URL", what, raw)
	}
	h, p := u.Hostname(), u.Port()
	if p == "" {
		p = defPort
	}
	if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", 0, fmt.Errorf("--dev serves %s on loopback only; %q is not a loopback address", what, h)
	}
	if h == "localhost" {
		h = "127.0.0.1"
	}
	port, err = strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("--dev: %s %q: bad port", what, raw)
	}
	return h, port, nil
}
