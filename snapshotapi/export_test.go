package snapshotapi

import "time"

// SetHubRing sets how many changes a hub keeps, whatever their age (within
// Config.WatchWindowBytes), for a test; it returns the undo.
func SetHubRing(n int) func() {
	old, oldWindow := hubRing, hubWindow
	hubRing, hubWindow = n, 0
	return func() { hubRing, hubWindow = old, oldWindow }
}

// SetHubWindow sets how long a hub keeps changes beyond the hubRing last (instead of
// Config.WatchWindow), for a test; it returns the undo.
func SetHubWindow(d time.Duration) func() {
	old := hubWindow
	hubWindow = d
	return func() { hubWindow = old }
}

// HubKept is what the ring of the hub of db.coll holds: its changes, and what they count
// for against Config.WatchWindowBytes.
func (s *Server) HubKept(db, coll string) (n int, bytes int64) {
	s.hubsMu.Lock()
	h := s.hubs[hubKey{db, coll}]
	s.hubsMu.Unlock()
	if h == nil {
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ring), h.bytes
}

// HubReceived is the count of changes the hub of db.coll has read (0: none runs).
func (s *Server) HubReceived(db, coll string) uint64 {
	s.hubsMu.Lock()
	h := s.hubs[hubKey{db, coll}]
	s.hubsMu.Unlock()
	if h == nil {
		return 0
	}
	return h.received()
}

// PauseDrainers holds every watch's drainer before its next read of the changes, as a
// process short of CPU does, until resume is called.
func (s *Server) PauseDrainers() (resume func()) {
	g := make(chan struct{})
	s.drainPause.Store(&g)
	return func() {
		s.drainPause.Store(nil)
		close(g)
	}
}

// PauseSwitches holds every watch's switch to a new generation after it read what differs
// and before it moves the watch, until resume is called; held counts the switches held.
func (s *Server) PauseSwitches() (held func() int, resume func()) {
	g := make(chan struct{})
	s.switchPause.Store(&g)
	return func() int { return int(s.switchesHeld.Load()) }, func() {
		s.switchPause.Store(nil)
		close(g)
	}
}

// StopHubs stops the server's watches as Run does when it returns, for a test that serves
// watches without running the server.
func (s *Server) StopHubs() { s.stopHubs() }
