package spectest

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// writeArgs applies the arguments shared by the write operations through set, which
// returns false for an argument the operation does not take.
func eachArg(a *args, set func(k string, v any) bool) error {
	for _, e := range a.d {
		if a.used[e.Key] {
			continue
		}
		a.used[e.Key] = true
		if e.Key == "session" || e.Key == "timeoutMS" {
			continue
		}
		if !set(e.Key, e.Value) {
			return unsupported("argument %s", e.Key)
		}
	}
	return nil
}

func num(v any) int64 {
	n, _ := number(v)
	return int64(n)
}

func anyList(v any) []any {
	a, _ := v.(bson.A)
	return []any(a)
}

func updateResult(res *mongo.UpdateResult) bson.D {
	d := bson.D{{Key: "matchedCount", Value: res.MatchedCount}, {Key: "modifiedCount", Value: res.ModifiedCount},
		{Key: "upsertedCount", Value: res.UpsertedCount}}
	if res.UpsertedID != nil {
		d = append(d, bson.E{Key: "upsertedId", Value: res.UpsertedID})
	}
	return d
}

func (r *run) collOp(ctx context.Context, c *mongo.Collection, name string, a *args) (any, error) {
	ctx, err := r.sessCtx(ctx, a)
	if err != nil {
		return nil, err
	}
	filter, _ := a.get("filter")
	if filter == nil {
		filter = bson.D{}
	}
	switch name {
	case "insertOne":
		d, _ := a.get("document")
		o := options.InsertOne()
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "bypassDocumentValidation":
				o.SetBypassDocumentValidation(v.(bool))
			case "comment":
				o.SetComment(v)
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		res, err := c.InsertOne(ctx, d, o)
		if err != nil {
			return nil, err
		}
		return bson.D{{Key: "insertedId", Value: res.InsertedID}}, nil
	case "insertMany":
		d, _ := a.get("documents")
		o := options.InsertMany()
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "ordered":
				o.SetOrdered(v.(bool))
			case "bypassDocumentValidation":
				o.SetBypassDocumentValidation(v.(bool))
			case "comment":
				o.SetComment(v)
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		res, err := c.InsertMany(ctx, anyList(d), o)
		if res == nil {
			return nil, err
		}
		ids := bson.D{}
		for i, id := range res.InsertedIDs {
			ids = append(ids, bson.E{Key: itoa(i), Value: id})
		}
		return bson.D{{Key: "insertedIds", Value: ids}}, err // a partial result with a write error
	case "updateOne", "updateMany", "replaceOne":
		upd, _ := a.get("update")
		if name == "replaceOne" {
			upd, _ = a.get("replacement")
		}
		var af []any
		var upsert, bypass *bool
		var coll *options.Collation
		var comment, hint, let, sort any
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "arrayFilters":
				af = anyList(v)
			case "upsert":
				b := v.(bool)
				upsert = &b
			case "bypassDocumentValidation":
				b := v.(bool)
				bypass = &b
			case "collation":
				cc := collation(v)
				coll = &cc
			case "comment":
				comment = v
			case "hint":
				hint = v
			case "let":
				let = v
			case "sort":
				if name == "updateMany" {
					return false
				}
				sort = v
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		var res *mongo.UpdateResult
		switch name {
		case "updateOne":
			o := options.UpdateOne()
			if af != nil {
				o.SetArrayFilters(af)
			}
			if upsert != nil {
				o.SetUpsert(*upsert)
			}
			if bypass != nil {
				o.SetBypassDocumentValidation(*bypass)
			}
			if coll != nil {
				o.SetCollation(coll)
			}
			if comment != nil {
				o.SetComment(comment)
			}
			if hint != nil {
				o.SetHint(hint)
			}
			if let != nil {
				o.SetLet(let)
			}
			if sort != nil {
				o.SetSort(sort)
			}
			res, err = c.UpdateOne(ctx, filter, upd, o)
		case "updateMany":
			o := options.UpdateMany()
			if af != nil {
				o.SetArrayFilters(af)
			}
			if upsert != nil {
				o.SetUpsert(*upsert)
			}
			if bypass != nil {
				o.SetBypassDocumentValidation(*bypass)
			}
			if coll != nil {
				o.SetCollation(coll)
			}
			if comment != nil {
				o.SetComment(comment)
			}
			if hint != nil {
				o.SetHint(hint)
			}
			if let != nil {
				o.SetLet(let)
			}
			res, err = c.UpdateMany(ctx, filter, upd, o)
		default:
			if af != nil {
				return nil, unsupported("replaceOne arrayFilters")
			}
			o := options.Replace()
			if upsert != nil {
				o.SetUpsert(*upsert)
			}
			if bypass != nil {
				o.SetBypassDocumentValidation(*bypass)
			}
			if coll != nil {
				o.SetCollation(coll)
			}
			if comment != nil {
				o.SetComment(comment)
			}
			if hint != nil {
				o.SetHint(hint)
			}
			if let != nil {
				o.SetLet(let)
			}
			if sort != nil {
				o.SetSort(sort)
			}
			res, err = c.ReplaceOne(ctx, filter, upd, o)
		}
		if err != nil {
			return nil, err
		}
		return updateResult(res), nil
	case "deleteOne", "deleteMany":
		var coll *options.Collation
		var comment, hint, let any
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "collation":
				cc := collation(v)
				coll = &cc
			case "comment":
				comment = v
			case "hint":
				hint = v
			case "let":
				let = v
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		var res *mongo.DeleteResult
		if name == "deleteOne" {
			o := options.DeleteOne()
			if coll != nil {
				o.SetCollation(coll)
			}
			if comment != nil {
				o.SetComment(comment)
			}
			if hint != nil {
				o.SetHint(hint)
			}
			if let != nil {
				o.SetLet(let)
			}
			res, err = c.DeleteOne(ctx, filter, o)
		} else {
			o := options.DeleteMany()
			if coll != nil {
				o.SetCollation(coll)
			}
			if comment != nil {
				o.SetComment(comment)
			}
			if hint != nil {
				o.SetHint(hint)
			}
			if let != nil {
				o.SetLet(let)
			}
			res, err = c.DeleteMany(ctx, filter, o)
		}
		if err != nil {
			return nil, err
		}
		return bson.D{{Key: "deletedCount", Value: res.DeletedCount}}, nil
	case "find", "findOne", "createFindCursor":
		o := options.Find()
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "sort":
				o.SetSort(v)
			case "projection":
				o.SetProjection(v)
			case "skip":
				o.SetSkip(num(v))
			case "limit":
				o.SetLimit(num(v))
			case "batchSize":
				o.SetBatchSize(int32(num(v)))
			case "hint":
				o.SetHint(v)
			case "collation":
				cc := collation(v)
				o.SetCollation(&cc)
			case "comment":
				o.SetComment(v)
			case "let":
				o.SetLet(v)
			case "allowDiskUse":
				o.SetAllowDiskUse(v.(bool))
			case "min":
				o.SetMin(v)
			case "max":
				o.SetMax(v)
			case "returnKey":
				o.SetReturnKey(v.(bool))
			case "showRecordId":
				o.SetShowRecordID(v.(bool))
			case "noCursorTimeout":
				o.SetNoCursorTimeout(v.(bool))
			case "allowPartialResults":
				o.SetAllowPartialResults(v.(bool))
			case "maxTimeMS":
				return false // the Go driver v2 has no per-operation maxTimeMS
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		if name == "findOne" {
			o.SetLimit(-1)
		}
		cur, err := c.Find(ctx, filter, o)
		if err != nil {
			return nil, err
		}
		if name == "createFindCursor" {
			return cur, nil
		}
		docs, err := all(ctx, cur)
		if err != nil || name == "find" {
			return docs, err
		}
		if l := docs.(bson.A); len(l) > 0 {
			return l[0], nil
		}
		return nil, nil
	case "findOneAndDelete", "findOneAndUpdate", "findOneAndReplace":
		var sr *mongo.SingleResult
		switch name {
		case "findOneAndDelete":
			o := options.FindOneAndDelete()
			if err := eachArg(a, func(k string, v any) bool {
				switch k {
				case "sort":
					o.SetSort(v)
				case "projection":
					o.SetProjection(v)
				case "hint":
					o.SetHint(v)
				case "collation":
					cc := collation(v)
					o.SetCollation(&cc)
				case "comment":
					o.SetComment(v)
				case "let":
					o.SetLet(v)
				default:
					return false
				}
				return true
			}); err != nil {
				return nil, err
			}
			sr = c.FindOneAndDelete(ctx, filter, o)
		case "findOneAndUpdate":
			upd, _ := a.get("update")
			o := options.FindOneAndUpdate()
			if err := eachArg(a, func(k string, v any) bool {
				switch k {
				case "sort":
					o.SetSort(v)
				case "projection":
					o.SetProjection(v)
				case "hint":
					o.SetHint(v)
				case "collation":
					cc := collation(v)
					o.SetCollation(&cc)
				case "comment":
					o.SetComment(v)
				case "let":
					o.SetLet(v)
				case "upsert":
					o.SetUpsert(v.(bool))
				case "arrayFilters":
					o.SetArrayFilters(anyList(v))
				case "bypassDocumentValidation":
					o.SetBypassDocumentValidation(v.(bool))
				case "returnDocument":
					o.SetReturnDocument(returnDoc(v))
				default:
					return false
				}
				return true
			}); err != nil {
				return nil, err
			}
			sr = c.FindOneAndUpdate(ctx, filter, upd, o)
		default:
			rep, _ := a.get("replacement")
			o := options.FindOneAndReplace()
			if err := eachArg(a, func(k string, v any) bool {
				switch k {
				case "sort":
					o.SetSort(v)
				case "projection":
					o.SetProjection(v)
				case "hint":
					o.SetHint(v)
				case "collation":
					cc := collation(v)
					o.SetCollation(&cc)
				case "comment":
					o.SetComment(v)
				case "let":
					o.SetLet(v)
				case "upsert":
					o.SetUpsert(v.(bool))
				case "bypassDocumentValidation":
					o.SetBypassDocumentValidation(v.(bool))
				case "returnDocument":
					o.SetReturnDocument(returnDoc(v))
				default:
					return false
				}
				return true
			}); err != nil {
				return nil, err
			}
			sr = c.FindOneAndReplace(ctx, filter, rep, o)
		}
		raw, err := sr.Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return raw, nil
	case "aggregate":
		pipeline, _ := a.get("pipeline")
		o, err := aggOptions(a)
		if err != nil {
			return nil, err
		}
		cur, err := c.Aggregate(ctx, pipeline, o)
		if err != nil {
			return nil, err
		}
		return all(ctx, cur)
	case "countDocuments":
		o := options.Count()
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "skip":
				o.SetSkip(num(v))
			case "limit":
				o.SetLimit(num(v))
			case "hint":
				o.SetHint(v)
			case "collation":
				cc := collation(v)
				o.SetCollation(&cc)
			case "comment":
				o.SetComment(v)
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		return c.CountDocuments(ctx, filter, o)
	case "estimatedDocumentCount":
		o := options.EstimatedDocumentCount()
		if err := eachArg(a, func(k string, v any) bool {
			if k == "comment" {
				o.SetComment(v)
				return true
			}
			return false
		}); err != nil {
			return nil, err
		}
		return c.EstimatedDocumentCount(ctx, o)
	case "distinct":
		field := a.str("fieldName")
		o := options.Distinct()
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "collation":
				cc := collation(v)
				o.SetCollation(&cc)
			case "comment":
				o.SetComment(v)
			case "hint":
				o.SetHint(v)
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		res := c.Distinct(ctx, field, filter, o)
		if err := res.Err(); err != nil {
			return nil, err
		}
		raw, err := res.Raw()
		if err != nil {
			return nil, err
		}
		var vals bson.A
		if err := bson.UnmarshalValue(bson.TypeArray, raw, &vals); err != nil {
			return nil, err
		}
		return normalize(vals), nil
	case "bulkWrite":
		reqs, _ := a.get("requests")
		o := options.BulkWrite()
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "ordered":
				o.SetOrdered(v.(bool))
			case "bypassDocumentValidation":
				o.SetBypassDocumentValidation(v.(bool))
			case "comment":
				o.SetComment(v)
			case "let":
				o.SetLet(v)
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		models, err := writeModels(reqs.(bson.A))
		if err != nil {
			return nil, err
		}
		res, err := c.BulkWrite(ctx, models, o)
		if res == nil {
			return nil, err
		}
		ups := bson.D{}
		for i := range models {
			if id, ok := res.UpsertedIDs[int64(i)]; ok {
				ups = append(ups, bson.E{Key: itoa(i), Value: id})
			}
		}
		return bson.D{{Key: "deletedCount", Value: res.DeletedCount}, {Key: "insertedCount", Value: res.InsertedCount},
			{Key: "matchedCount", Value: res.MatchedCount}, {Key: "modifiedCount", Value: res.ModifiedCount},
			{Key: "upsertedCount", Value: res.UpsertedCount}, {Key: "upsertedIds", Value: ups}}, err // partial with a write error
	case "createIndex":
		keys, _ := a.get("keys")
		o := options.Index()
		if err := eachArg(a, func(k string, v any) bool {
			switch k {
			case "name":
				o.SetName(v.(string))
			case "unique":
				o.SetUnique(v.(bool))
			case "sparse":
				o.SetSparse(v.(bool))
			case "expireAfterSeconds":
				o.SetExpireAfterSeconds(int32(num(v)))
			case "partialFilterExpression":
				o.SetPartialFilterExpression(v)
			case "hidden":
				o.SetHidden(v.(bool))
			default:
				return false
			}
			return true
		}); err != nil {
			return nil, err
		}
		return c.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: keys, Options: o})
	case "dropIndex":
		n := a.str("name")
		if err := a.unused(); err != nil {
			return nil, unsupported("%v", err)
		}
		return nil, c.Indexes().DropOne(ctx, n)
	case "dropIndexes":
		if err := a.unused(); err != nil {
			return nil, unsupported("%v", err)
		}
		return nil, c.Indexes().DropAll(ctx)
	case "listIndexes":
		o := options.ListIndexes()
		if n, ok := a.int64("batchSize"); ok {
			o.SetBatchSize(int32(n))
		}
		if err := a.unused(); err != nil {
			return nil, unsupported("%v", err)
		}
		cur, err := c.Indexes().List(ctx, o)
		if err != nil {
			return nil, err
		}
		return all(ctx, cur)
	case "listIndexNames":
		specs, err := c.Indexes().ListSpecifications(ctx)
		if err != nil {
			return nil, err
		}
		out := bson.A{}
		for _, s := range specs {
			out = append(out, s.Name)
		}
		return out, nil
	case "createChangeStream":
		pipeline, o, err := streamArgs(a)
		if err != nil {
			return nil, err
		}
		return c.Watch(ctx, pipeline, o)
	case "rename":
		to := a.str("to")
		cmd := bson.D{{Key: "renameCollection", Value: c.Database().Name() + "." + c.Name()},
			{Key: "to", Value: c.Database().Name() + "." + to}}
		if b, ok := a.bool("dropTarget"); ok {
			cmd = append(cmd, bson.E{Key: "dropTarget", Value: b})
		}
		if err := a.unused(); err != nil {
			return nil, unsupported("%v", err)
		}
		return nil, c.Database().Client().Database("admin").RunCommand(ctx, cmd).Err()
	case "drop":
		return nil, c.Drop(ctx)
	case "createSearchIndex", "createSearchIndexes", "dropSearchIndex", "updateSearchIndex", "listSearchIndexes":
		return r.searchIndexOp(ctx, c, name, a)
	}
	return nil, unsupported("collection operation %s", name)
}

func returnDoc(v any) options.ReturnDocument {
	if s, _ := v.(string); s == "After" || s == "after" {
		return options.After
	}
	return options.Before
}

func writeModels(reqs bson.A) ([]mongo.WriteModel, error) {
	var out []mongo.WriteModel
	for _, rv := range reqs {
		rd := rv.(bson.D)
		kind := rd[0].Key
		a := rd[0].Value.(bson.D)
		filter, _ := lookup(a, "filter")
		for _, e := range a {
			switch e.Key {
			case "filter", "document", "update", "replacement", "upsert", "arrayFilters", "collation", "hint", "sort":
			default:
				return nil, unsupported("bulkWrite %s argument %s", kind, e.Key)
			}
		}
		upsert, hasUpsert := lookup(a, "upsert")
		af, hasAF := lookup(a, "arrayFilters")
		hint, hasHint := lookup(a, "hint")
		coll, hasColl := lookup(a, "collation")
		sort, hasSort := lookup(a, "sort")
		cc := collation(coll)
		switch kind {
		case "insertOne":
			d, _ := lookup(a, "document")
			out = append(out, mongo.NewInsertOneModel().SetDocument(d))
		case "updateOne":
			u, _ := lookup(a, "update")
			m := mongo.NewUpdateOneModel().SetFilter(filter).SetUpdate(u)
			if hasUpsert {
				m.SetUpsert(upsert.(bool))
			}
			if hasAF {
				m.SetArrayFilters(anyList(af))
			}
			if hasHint {
				m.SetHint(hint)
			}
			if hasColl {
				m.SetCollation(&cc)
			}
			if hasSort {
				m.SetSort(sort)
			}
			out = append(out, m)
		case "updateMany":
			u, _ := lookup(a, "update")
			m := mongo.NewUpdateManyModel().SetFilter(filter).SetUpdate(u)
			if hasUpsert {
				m.SetUpsert(upsert.(bool))
			}
			if hasAF {
				m.SetArrayFilters(anyList(af))
			}
			if hasHint {
				m.SetHint(hint)
			}
			if hasColl {
				m.SetCollation(&cc)
			}
			out = append(out, m)
		case "replaceOne":
			u, _ := lookup(a, "replacement")
			m := mongo.NewReplaceOneModel().SetFilter(filter).SetReplacement(u)
			if hasUpsert {
				m.SetUpsert(upsert.(bool))
			}
			if hasHint {
				m.SetHint(hint)
			}
			if hasColl {
				m.SetCollation(&cc)
			}
			if hasSort {
				m.SetSort(sort)
			}
			out = append(out, m)
		case "deleteOne":
			m := mongo.NewDeleteOneModel().SetFilter(filter)
			if hasHint {
				m.SetHint(hint)
			}
			if hasColl {
				m.SetCollation(&cc)
			}
			out = append(out, m)
		case "deleteMany":
			m := mongo.NewDeleteManyModel().SetFilter(filter)
			if hasHint {
				m.SetHint(hint)
			}
			if hasColl {
				m.SetCollation(&cc)
			}
			out = append(out, m)
		default:
			return nil, unsupported("bulkWrite request %s", kind)
		}
	}
	return out, nil
}

func (r *run) searchIndexOp(ctx context.Context, c *mongo.Collection, name string, a *args) (any, error) {
	view := c.SearchIndexes()
	switch name {
	case "createSearchIndex":
		mv, _ := a.get("model")
		return view.CreateOne(ctx, searchModel(mv.(bson.D)))
	case "createSearchIndexes":
		mv, _ := a.get("models")
		var ms []mongo.SearchIndexModel
		for _, m := range mv.(bson.A) {
			ms = append(ms, searchModel(m.(bson.D)))
		}
		return view.CreateMany(ctx, ms)
	case "dropSearchIndex":
		return nil, view.DropOne(ctx, a.str("name"))
	case "updateSearchIndex":
		def, _ := a.get("definition")
		return nil, view.UpdateOne(ctx, a.str("name"), def)
	case "listSearchIndexes":
		o := options.SearchIndexes()
		if n := a.str("name"); n != "" {
			o.SetName(n)
		}
		if _, ok := a.get("aggregationOptions"); ok {
			return nil, unsupported("listSearchIndexes aggregationOptions")
		}
		cur, err := view.List(ctx, o)
		if err != nil {
			return nil, err
		}
		return all(ctx, cur)
	}
	return nil, unsupported("%s", name)
}

func searchModel(d bson.D) mongo.SearchIndexModel {
	m := mongo.SearchIndexModel{Definition: doc(d, "definition"), Options: options.SearchIndexes()}
	if n := str(d, "name"); n != "" {
		m.Options.SetName(n)
	}
	if t := str(d, "type"); t != "" {
		m.Options.SetType(t)
	}
	return m
}

func itoa(i int) string {
	return string(appendInt(nil, i))
}

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}
