package minimongo

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MongoDB error codes used by the server.
const (
	codeBadValue                  = 2
	codeInvalidBSON               = 22
	codeFailedToParse             = 9
	codeTypeMismatch              = 14
	codeInvalidLength             = 16
	codeIllegalOperation          = 20
	codeNamespaceNotFound         = 26
	codeIndexNotFound             = 27
	codePathNotViable             = 28
	codeConflictingUpdateOps      = 40
	codeCursorNotFound            = 43
	codeNoMatchingDocument        = 47
	codeNamespaceExists           = 48
	codeInvalidIdField            = 53
	codeCommandNotFound           = 59
	codeImmutableField            = 66
	codeInvalidOptions            = 72
	codeInvalidNamespace          = 73
	codeIndexOptionsConflict      = 85
	codeIndexKeySpecsConflict     = 86
	codeWriteConflict             = 112
	codeInvalidIndexSpecOption    = 197
	codeTransactionTooOld         = 225
	codeNoSuchTransaction         = 251
	codeTransactionCommitted      = 256
	codeInvalidResumeToken        = 260
	codeOperationNotSupportedInTx = 263
	codeChangeStreamHistoryLost   = 286
	codeDuplicateKey              = 11000
	codeInterruptedAtShutdown     = 11600
	codeUnknownField              = 40415
	codeUnrecognizedStage         = 40324
	codeInvalidPipelineOperator   = 168
	codeDocumentValidation        = 121
	codeDollarPrefixedField       = 52
	codeBSONObjectTooLarge        = 10334
)

var codeNames = map[int32]string{
	codeBSONObjectTooLarge:             "BSONObjectTooLarge",
	codeBadValue:                       "BadValue",
	codeInvalidBSON:                    "InvalidBSON",
	codeFailedToParse:                  "FailedToParse",
	codeTypeMismatch:                   "TypeMismatch",
	codeInvalidLength:                  "InvalidLength",
	codeIllegalOperation:               "IllegalOperation",
	codeNamespaceNotFound:              "NamespaceNotFound",
	codeIndexNotFound:                  "IndexNotFound",
	codePathNotViable:                  "PathNotViable",
	codeConflictingUpdateOps:           "ConflictingUpdateOperators",
	codeCursorNotFound:                 "CursorNotFound",
	codeNoMatchingDocument:             "NoMatchingDocument",
	codeNamespaceExists:                "NamespaceExists",
	codeInvalidIdField:                 "InvalidIdField",
	codeCommandNotFound:                "CommandNotFound",
	codeImmutableField:                 "ImmutableField",
	codeInvalidOptions:                 "InvalidOptions",
	codeInvalidNamespace:               "InvalidNamespace",
	codeIndexOptionsConflict:           "IndexOptionsConflict",
	codeIndexKeySpecsConflict:          "IndexKeySpecsConflict",
	codeWriteConflict:                  "WriteConflict",
	codeInvalidIndexSpecOption:         "InvalidIndexSpecificationOption",
	codeTransactionTooOld:              "TransactionTooOld",
	codeNoSuchTransaction:              "NoSuchTransaction",
	codeTransactionCommitted:           "TransactionCommitted",
	codeInvalidResumeToken:             "InvalidResumeToken",
	codeOperationNotSupportedInTx:      "OperationNotSupportedInTransaction",
	codeChangeStreamHistoryLost:        "ChangeStreamHistoryLost",
	codeDuplicateKey:                   "DuplicateKey",
	codeInterruptedAtShutdown:          "InterruptedAtShutdown",
	codeInvalidPipelineOperator:        "InvalidPipelineOperator",
	codeConflictingOperationInProgress: "ConflictingOperationInProgress",
	codeChangeStreamFatalErr:           "ChangeStreamFatalError",
	codeDocumentValidation:             "DocumentValidationFailure",
	// codes failCommand is commonly configured with
	1: "InternalError", 6: "HostUnreachable", 7: "HostNotFound", 8: "UnknownError",
	13: "Unauthorized", 24: "LockTimeout", 50: "MaxTimeMSExpired", 64: "WriteConcernFailed",
	79: "UnknownReplWriteConcern", 89: "NetworkTimeout", 91: "ShutdownInProgress",
	100: "UnsatisfiableWriteConcern", 133: "FailedToSatisfyReadPreference",
	134: "ReadConcernMajorityNotAvailableYet", 150: "StaleEpoch", 189: "PrimarySteppedDown",
	codeRetryChangeStream: "RetryChangeStream", 262: "ExceededTimeLimit", 267: "PreparedTransactionInProgress",
	9001: "SocketException", 10107: "NotWritablePrimary", 11601: "Interrupted",
	11602: "InterruptedDueToReplStateChange", 13388: "StaleConfig", 13435: "NotPrimaryNoSecondaryOk",
	13436: "NotPrimaryOrSecondary", 50915: "BackupCursorOpenConflictWithCheckpoint",
}

// cmdError is an error reported to the client the way MongoDB reports it.
type cmdError struct {
	Code     int32
	CodeName string
	Msg      string
	Labels   []string
	Extra    bson.D // additional fields such as keyPattern/keyValue
}

func (e *cmdError) Error() string { return e.Msg }

func (e *cmdError) codeName() string {
	if e.CodeName != "" {
		return e.CodeName
	}
	if n, ok := codeNames[e.Code]; ok {
		return n
	}
	return fmt.Sprintf("Location%d", e.Code)
}

func newErr(code int32, format string, args ...any) *cmdError {
	return &cmdError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

func errBadValue(msg string) *cmdError { return &cmdError{Code: codeBadValue, Msg: msg} }

func errUnsupported(what string) *cmdError {
	return &cmdError{Code: codeBadValue, Msg: "minimongo does not support " + what}
}

func errWriteConflict() *cmdError {
	return &cmdError{
		Code:   codeWriteConflict,
		Msg:    "Write conflict during plan execution and yielding is disabled. :: Please retry your operation or multi-document transaction.",
		Labels: []string{"TransientTransactionError"},
	}
}

func asCmdError(err error) *cmdError {
	if ce, ok := err.(*cmdError); ok {
		return ce
	}
	return &cmdError{Code: 1, CodeName: "InternalError", Msg: err.Error()}
}

// errorReply renders an error as a command reply document.
func errorReply(err error) bson.D {
	ce := asCmdError(err)
	d := errorBody(ce)
	if len(ce.Labels) > 0 {
		d = append(d, bson.E{Key: "errorLabels", Value: labelsValue(ce.Labels)})
	}
	return d
}

// errorBody renders an error as a command reply document without labels.
func errorBody(ce *cmdError) bson.D {
	d := bson.D{
		{Key: "ok", Value: 0.0},
		{Key: "errmsg", Value: ce.Msg},
		{Key: "code", Value: ce.Code},
		{Key: "codeName", Value: ce.codeName()},
	}
	return append(d, ce.Extra...)
}

// writeErrorDoc renders an error as an entry of writeErrors.
func writeErrorDoc(index int, err error) bson.D {
	ce := asCmdError(err)
	d := bson.D{
		{Key: "index", Value: int32(index)},
		{Key: "code", Value: ce.Code},
	}
	d = append(d, ce.Extra...)
	return append(d, bson.E{Key: "errmsg", Value: ce.Msg})
}
