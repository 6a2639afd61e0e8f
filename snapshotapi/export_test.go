package snapshotapi

// SetHubRing sets how many changes a hub keeps, for a test; it returns the undo.
func SetHubRing(n int) func() {
	old := hubRing
	hubRing = n
	return func() { hubRing = old }
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
