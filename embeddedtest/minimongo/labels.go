package minimongo

import "go.mongodb.org/mongo-driver/v2/bson"

// Error labels the server attaches itself, following MongoDB's
// ErrorLabelBuilder. UnknownTransactionCommitResult is not among them: drivers
// add that label on their side.
const (
	labelTransientTxn        = "TransientTransactionError"
	labelRetryableWrite      = "RetryableWriteError"
	labelNoWritesPerformed   = "NoWritesPerformed"
	labelResumableStream     = "ResumableChangeStreamError"
	labelNonResumableStream  = "NonResumableChangeStreamError"
	codeRetryChangeStream    = 234
	codeFailedToSatisfyRP    = 133
	codeChangeStreamFatalErr = 280
)

// retriableCodes is MongoDB's RetriableError category.
var retriableCodes = map[int32]bool{
	6: true, 7: true, 89: true, 91: true, 134: true, 189: true, 262: true, 317: true, 358: true,
	9001: true, 10107: true, 11600: true, 11602: true, 13435: true, 13436: true, 50915: true,
}

// networkCodes is MongoDB's NetworkError category.
var networkCodes = map[int32]bool{6: true, 7: true, 89: true, 317: true, 9001: true}

// needRetargettingCodes is MongoDB's NeedRetargettingError category
// (StaleEpoch, StaleConfig).
var needRetargettingCodes = map[int32]bool{150: true, 13388: true}

// snapshotCodes is MongoDB's SnapshotError category.
var snapshotCodes = map[int32]bool{239: true, 246: true, 250: true, 272: true}

// nonResumableStreamCodes is MongoDB's NonResumableChangeStreamError category.
var nonResumableStreamCodes = map[int32]bool{codeChangeStreamFatalErr: true, codeChangeStreamHistoryLost: true}

func isCommitOrAbort(name string) bool {
	return name == "commitTransaction" || name == "abortTransaction"
}

// isTransientTxnError is MongoDB's isTransientTransactionError.
func isTransientTxnError(code int32, hasWCE, commitOrAbort bool) bool {
	switch code {
	case codeWriteConflict, 24 /* LockTimeout */, 267 /* PreparedTransactionInProgress */, 343, 249:
		return true
	}
	if snapshotCodes[code] || needRetargettingCodes[code] {
		return true
	}
	if commitOrAbort {
		return code == codeNoSuchTransaction && !hasWCE
	}
	return retriableCodes[code] || code == codeNoSuchTransaction
}

// replyCode describes the outcome a reply's labels are computed from.
type replyCode struct {
	code, wcCode       int32
	hasCode, hasWCCode bool
}

// errorLabels computes the labels MongoDB attaches to the reply of r.
func (r *request) errorLabels(rc replyCode, wrote bool, lastOpBefore uint64) []string {
	var out []string
	commitOrAbort := isCommitOrAbort(r.name)
	inTxn := r.txnNum != nil && r.auto != nil
	transientOrRetryable := false
	if rc.hasCode && inTxn && isTransientTxnError(rc.code, rc.hasWCCode, commitOrAbort) {
		out = append(out, labelTransientTxn)
		transientOrRetryable = true
	} else if r.txnNum != nil && (r.auto == nil || commitOrAbort) &&
		((rc.hasCode && retriableCodes[rc.code]) || (rc.hasWCCode && retriableCodes[rc.wcCode])) {
		out = append(out, labelRetryableWrite)
		transientOrRetryable = true
		if lastOpBefore != 0 && !wrote {
			out = append(out, labelNoWritesPerformed)
		}
	}
	resumable := rc.hasCode && !rc.hasWCCode && (r.name == "aggregate" || r.name == "getMore") &&
		(retriableCodes[rc.code] || networkCodes[rc.code] || needRetargettingCodes[rc.code] ||
			rc.code == codeRetryChangeStream || rc.code == codeFailedToSatisfyRP) &&
		r.isChangeStream()
	switch {
	case !transientOrRetryable && resumable:
		out = append(out, labelResumableStream)
	case rc.hasCode && nonResumableStreamCodes[rc.code]:
		out = append(out, labelNonResumableStream)
	}
	return out
}

// isChangeStream reports whether r opens or continues a change stream.
func (r *request) isChangeStream() bool {
	switch r.name {
	case "aggregate":
		return isChangeStreamAggregate(r.cmd)
	case "getMore":
		// Only a getMore that checked out its cursor knows it continues a change
		// stream: MongoDB reads that from the cursor's originating command, which
		// a failCommand error (raised before the checkout) does not have.
		return r.streamCursor
	}
	return false
}

// mergeLabels adds to labels those of extra it does not hold yet.
func mergeLabels(labels, extra []string) []string {
	for _, l := range extra {
		found := false
		for _, x := range labels {
			if x == l {
				found = true
				break
			}
		}
		if !found {
			labels = append(labels, l)
		}
	}
	return labels
}

func labelsValue(labels []string) bson.A {
	a := make(bson.A, len(labels))
	for i, l := range labels {
		a[i] = l
	}
	return a
}
