package minimongo

import "go.mongodb.org/mongo-driver/v2/bson"

// writeConcernError returns the write concern error of a command that
// accepted a write concern this one-member replica set cannot satisfy: w
// greater than one (UnsatisfiableWriteConcern, 100) or a tag set it does not
// have (UnknownReplWriteConcern, 79). As in MongoDB the command has run; the
// error only says it was not replicated as asked.
func (r *request) writeConcernError() bson.D {
	v, ok := r.arg("writeConcern")
	if !ok {
		return nil
	}
	wc, _ := v.(bson.D)
	w, ok := lookupField(wc, "w")
	if !ok {
		return nil
	}
	var code int32
	var name, msg string
	if n, isNum := asInt64(w); isNum {
		if n <= 1 {
			return nil
		}
		code, name, msg = 100, "UnsatisfiableWriteConcern", "Not enough data-bearing nodes"
	} else if s, isStr := w.(string); isStr {
		if s == "majority" {
			return nil
		}
		code, name, msg = 79, "UnknownReplWriteConcern", "No write concern mode named '"+s+"' found in replica set configuration"
	} else {
		return nil
	}
	timeout := any(int32(0))
	if t, ok := lookupField(wc, "wtimeout"); ok {
		timeout = t
	}
	echo := bson.D{{Key: "w", Value: w}, {Key: "wtimeout", Value: timeout}, {Key: "provenance", Value: "clientSupplied"}}
	return bson.D{
		{Key: "code", Value: code},
		{Key: "codeName", Value: name},
		{Key: "errmsg", Value: msg},
		{Key: "errInfo", Value: bson.D{{Key: "writeConcern", Value: echo}}},
	}
}
