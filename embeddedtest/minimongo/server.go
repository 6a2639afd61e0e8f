package minimongo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Options configures a Server. The zero value is usable.
type Options struct {
	// Addr is the TCP address to listen on; default "127.0.0.1:0".
	Addr string
	// ReplicaSet is the replica set name reported by hello; default "rs0".
	ReplicaSet string
	// OplogSize is the number of change events retained for change streams;
	// default 10000. Resuming from a point older than the retained window
	// fails with ChangeStreamHistoryLost.
	OplogSize int
	// CursorTimeout is how long an idle cursor survives; default 10 minutes.
	CursorTimeout time.Duration
	// TTLInterval is how often TTL indexes are swept; default 1 second
	// (MongoDB uses 60 seconds).
	TTLInterval time.Duration
	// TransactionLifetime bounds how long a transaction may stay open
	// before it is aborted; default 60 seconds.
	TransactionLifetime time.Duration
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Dir, when set, keeps the server's committed state across restarts in the file
	// Dir/state.bson (see Persistence in the package documentation): Start loads it if it
	// exists, and the server writes it every SnapshotInterval while it changes and on
	// Close. Start creates Dir if needed. One Server at a time may use a Dir. Empty keeps
	// everything in memory only.
	Dir string
	// SnapshotInterval is how often a server with a Dir writes its state; default 5
	// seconds. A crash (a stop without Close) loses at most the writes of one interval.
	SnapshotInterval time.Duration
}

// Server is an in-process server speaking the MongoDB wire protocol.
type Server struct {
	opts      Options
	log       *slog.Logger
	ln        net.Listener
	addr      string
	processID bson.ObjectID

	mu      sync.Mutex
	cond    *sync.Cond
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
	conns   map[net.Conn]struct{}
	connID  int32

	st      *storage
	failCmd *failCommand // the failCommand fail point; nil until configured
	// failGetMoreAfterCursorCheckout and onPrimaryTransactionalWrite; nil until configured
	failGetMore, failTxnWrite *failCommand
	persist                   *persister // nil without Options.Dir
}

// Start starts a server listening on loopback.
func Start(opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.ReplicaSet == "" {
		opts.ReplicaSet = "rs0"
	}
	if opts.OplogSize <= 0 {
		opts.OplogSize = 10000
	}
	if opts.CursorTimeout <= 0 {
		opts.CursorTimeout = 10 * time.Minute
	}
	if opts.TTLInterval <= 0 {
		opts.TTLInterval = time.Second
	}
	if opts.TransactionLifetime <= 0 {
		opts.TransactionLifetime = 60 * time.Second
	}
	if opts.SnapshotInterval <= 0 {
		opts.SnapshotInterval = defaultSnapshotInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:      opts,
		log:       log,
		processID: bson.NewObjectID(),
		closing:   make(chan struct{}),
		conns:     map[net.Conn]struct{}{},
	}
	s.cond = sync.NewCond(&s.mu)
	s.st = newStorage(s)
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("minimongo: %w", err)
		}
		removeStaleTemps(opts.Dir)
		s.persist = &persister{path: filepath.Join(opts.Dir, stateFileName)}
		if err := s.st.loadState(s.persist.path, opts.OplogSize); err != nil {
			return nil, err
		}
		p := s.persist
		p.savedVer, p.savedTS = s.st.ver, s.st.lastTS
		p.doneVer, p.doneTS = p.savedVer, p.savedTS
		log.Debug("minimongo: state loaded", "file", s.persist.path, "databases", len(s.st.dbs), "events", len(s.st.oplog))
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, err
	}
	s.ln, s.addr = ln, ln.Addr().String()
	s.wg.Add(2)
	go s.acceptLoop()
	go s.sweepLoop()
	if s.persist != nil {
		s.wg.Add(1)
		go s.snapshotLoop()
	}
	return s, nil
}

// Addr returns the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// URI returns a connection string that makes the official driver treat the
// server as the primary of a one-member replica set.
func (s *Server) URI() string {
	return fmt.Sprintf("mongodb://%s/?replicaSet=%s&directConnection=true", s.addr, s.opts.ReplicaSet)
}

// Close stops the server, closes every connection and waits for all of its
// goroutines to finish. A server with a Dir then writes its state; Close reports
// whether that failed.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	for c := range s.conns {
		_ = c.Close()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	if s.persist != nil && !s.persist.noFinal {
		err = errors.Join(err, s.writeSnapshot(true))
	}
	return err
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.connID++
		id := s.connID
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c, id)
	}
}

// sweepLoop expires TTL documents, idle cursors, stale transactions and
// idle sessions.
func (s *Server) sweepLoop() {
	defer s.wg.Done()
	// Cursor, transaction and session expiry are checked at least every
	// second; TTL indexes every TTLInterval.
	tick := s.opts.TTLInterval
	if tick > time.Second {
		tick = time.Second
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	lastTTL := time.Now()
	for {
		select {
		case <-s.closing:
			return
		case now := <-t.C:
			s.mu.Lock()
			if now.Sub(lastTTL) >= s.opts.TTLInterval-tick/2 {
				s.st.expireTTL(now)
				lastTTL = now
			}
			s.st.sweep(now)
			s.mu.Unlock()
		}
	}
}

type conn struct {
	id       int32
	raw      net.Conn
	appName  string // from the handshake's client metadata
	lastOp   uint64 // storage version after the connection's last write
	closeNow bool   // failCommand closes the connection instead of replying
}

func (s *Server) serveConn(c net.Conn, id int32) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		_ = c.Close()
	}()
	cc := &conn{id: id, raw: c}
	r := bufio.NewReader(c)
	var reqID int32
	for {
		m, err := readMessage(r)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("minimongo: connection closed", "conn", id, "err", err)
			}
			return
		}
		reply := s.handle(cc, m)
		if cc.closeNow {
			return
		}
		if m.flags&flagMoreToCome != 0 {
			continue // the client does not expect an answer
		}
		raw, err := encodeDoc(nil, reply)
		if err != nil {
			raw, _ = encodeDoc(nil, errorReply(err))
		}
		reqID++
		if _, err := c.Write(encodeReply(reqID, m, raw)); err != nil {
			return
		}
	}
}
