package changefeed

import (
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// pipelineStages are the stages a feed's pipeline may hold: those MongoDB allows after
// $changeStream that keep one event per change ($redact aside, which this package does not
// need to judge and the test backend does not run).
var pipelineStages = map[string]bool{
	"$match": true, "$project": true, "$addFields": true, "$set": true, "$unset": true,
}

// eventFields are the fields of a change event a feed reads; a pipeline must not remove or
// overwrite them. _id is the resume token: MongoDB itself fails a stream whose pipeline
// changes it (ChangeStreamFatalError, 280).
var eventFields = []string{"_id", "operationType", "ns", "documentKey", "clusterTime"}

// validatePipeline checks that every stage is one a feed supports and that none removes or
// replaces a field the feed reads. MongoDB validates the expressions themselves when the
// stream opens.
func validatePipeline(p mongo.Pipeline) error {
	for i, st := range p {
		if len(st) != 1 {
			return fmt.Errorf("%w: Pipeline[%d]: a stage has exactly one key (its operator), found %d", ErrInvalidConfig, i, len(st))
		}
		name, arg := st[0].Key, st[0].Value
		if !pipelineStages[name] {
			return fmt.Errorf("%w: Pipeline[%d]: stage %q is not supported in a changefeed (use $match, $project, $addFields, $set or $unset)", ErrInvalidConfig, i, name)
		}
		var err error
		switch name {
		case "$match":
			_, err = asDoc(arg)
		case "$project":
			err = checkProject(arg)
		case "$addFields", "$set":
			err = checkSet(arg)
		case "$unset":
			err = checkUnset(arg)
		}
		if err != nil {
			return fmt.Errorf("%w: Pipeline[%d] (%s): %v", ErrInvalidConfig, i, name, err)
		}
	}
	return nil
}

// touches reports the event field that path is, is inside of, or contains.
func touches(path string) string {
	for _, f := range eventFields {
		if path == f || strings.HasPrefix(path, f+".") || strings.HasPrefix(f, path+".") {
			return f
		}
	}
	return ""
}

func checkProject(arg any) error {
	d, err := asDoc(arg)
	if err != nil {
		return err
	}
	if len(d) == 0 {
		return fmt.Errorf("an empty projection")
	}
	inclusion := false
	included := map[string]bool{"_id": true}
	for _, e := range d {
		keep, isFlag := projectionFlag(e.Value)
		if !isFlag {
			// A computed field: an inclusion projection that sets e.Key.
			if f := touches(e.Key); f != "" {
				return fmt.Errorf("it overwrites %q, which the feed reads", f)
			}
			inclusion = true
			continue
		}
		if e.Key == "_id" {
			if !keep {
				return fmt.Errorf("it removes _id, the resume token")
			}
			continue
		}
		if keep {
			inclusion = true
			included[e.Key] = true
		} else if f := touches(e.Key); f != "" {
			return fmt.Errorf("it removes %q, which the feed reads", f)
		}
	}
	if inclusion {
		for _, f := range eventFields {
			if !included[f] {
				return fmt.Errorf("an inclusion projection must keep %s (it drops %q)", strings.Join(eventFields, ", "), f)
			}
		}
	}
	return nil
}

// projectionFlag reports whether v is an inclusion/exclusion flag (a number or boolean) and
// which.
func projectionFlag(v any) (keep, isFlag bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case int:
		return x != 0, true
	case int32:
		return x != 0, true
	case int64:
		return x != 0, true
	case float64:
		return x != 0, true
	}
	return false, false
}

func checkSet(arg any) error {
	d, err := asDoc(arg)
	if err != nil {
		return err
	}
	for _, e := range d {
		if f := touches(e.Key); f != "" {
			return fmt.Errorf("it overwrites %q, which the feed reads", f)
		}
	}
	return nil
}

func checkUnset(arg any) error {
	var fields []string
	switch x := arg.(type) {
	case string:
		fields = []string{x}
	case bson.A:
		for _, v := range x {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("$unset takes a field name or an array of field names")
			}
			fields = append(fields, s)
		}
	case []any:
		return checkUnset(bson.A(x))
	case []string:
		fields = x
	default:
		return fmt.Errorf("$unset takes a field name or an array of field names")
	}
	for _, f := range fields {
		if t := touches(f); t != "" {
			return fmt.Errorf("it removes %q, which the feed reads", t)
		}
	}
	return nil
}

// asDoc returns a stage argument as a document; the configuration file gives maps.
func asDoc(v any) (bson.D, error) {
	switch x := v.(type) {
	case bson.D:
		return x, nil
	case bson.M:
		return mapDoc(x), nil
	case map[string]any:
		return mapDoc(x), nil
	}
	return nil, fmt.Errorf("the stage's argument must be a document, got %T", v)
}

func mapDoc(m map[string]any) bson.D {
	d := make(bson.D, 0, len(m))
	for k, v := range m {
		d = append(d, bson.E{Key: k, Value: v})
	}
	return d
}
