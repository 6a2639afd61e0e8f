package streamscan

// SetBatchBytes sets the byte bound of one fetch for a test and returns a func restoring it.
func SetBatchBytes(n int) func() {
	old := batchBytes
	batchBytes = n
	return func() { batchBytes = old }
}
