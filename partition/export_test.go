package partition

// ProbeCounts returns how many liveness probes s sent were answered, went unanswered or found
// no responders, and how many member keys and leases it removed as gone.
func ProbeCounts(s *Subscriber) (answered, noAnswer, gone, removed int64) {
	l := s.live
	return l.answered.Load(), l.noAnswer.Load(), l.gone.Load(), l.removed.Load()
}
