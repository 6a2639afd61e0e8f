//go:build dev

package devmode

import (
	"net"
	"strconv"

	"github.com/jetbus/jetbus/internal/devenv"
)

const available = true

// Start starts the embedded NATS server and the MongoDB test backend.
func Start(cfg Config) (Env, error) {
	_, natsPort, err := listenAddr(cfg.NATSURL, "NATS", "4222")
	if err != nil {
		return nil, err
	}
	mhost, mport, err := listenAddr(cfg.MongoURI, "MongoDB", "27017")
	if err != nil {
		return nil, err
	}
	if natsPort == 0 {
		natsPort = -1
	}
	return devenv.Start(devenv.Config{
		Dir:       cfg.Dir,
		NATSPort:  natsPort,
		MongoAddr: net.JoinHostPort(mhost, strconv.Itoa(mport)),
		Logger:    cfg.Logger,
	})
}
