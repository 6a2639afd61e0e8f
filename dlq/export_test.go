package dlq

// SetReleaseBatch sets how many replayed keys are released at once, for a test, and returns
// a func restoring it.
func SetReleaseBatch(n int) func() {
	old := releaseBatch
	releaseBatch = n
	return func() { releaseBatch = old }
}

// SetReplayChunk sets how many letters Replay replays at a time, for a test, and returns a
// func restoring it.
func SetReplayChunk(n int) func() {
	old := chunkLetters
	chunkLetters = n
	return func() { chunkLetters = old }
}

// SetMaxBlockedKeys sets how many failed keys a replay remembers, for a test, and returns a
// func restoring it.
func SetMaxBlockedKeys(n int) func() {
	old := maxBlockedKeys
	maxBlockedKeys = n
	return func() { maxBlockedKeys = old }
}
