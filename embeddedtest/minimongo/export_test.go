package minimongo

// Crash stops the server as a crash would: without the final write of its state.
func (s *Server) Crash() error {
	s.mu.Lock()
	if s.persist != nil {
		s.persist.noFinal = true
	}
	s.mu.Unlock()
	return s.Close()
}

// SnapshotsWritten counts the state files the server has written.
func (s *Server) SnapshotsWritten() int64 {
	if s.persist == nil {
		return 0
	}
	return s.persist.writes.Load()
}

// StateSaved reports whether the state file holds the current state.
func (s *Server) StateSaved() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.persist
	return p != nil && !p.dirty(s.st) && p.doneVer == s.st.ver && p.doneTS == s.st.lastTS
}
