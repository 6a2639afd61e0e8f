package snapshotapi

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// getKey serves GET and HEAD /v1/views/{view}/{key}.
func (s *Server) getKey(c echo.Context) error {
	v, e := s.viewOf(c)
	if e != nil {
		return e
	}
	key, e := pathKey(c)
	if e != nil {
		return e
	}
	r := c.Request()
	params, e := splitQuery(r.URL.RawQuery, s.cfg.MaxQueryBytes)
	if e != nil {
		return e
	}
	rp, e := parseKeyParams(params, v, s.cfg.MaxWait)
	if e != nil {
		return e
	}
	if e := checkValidators(r.Header); e != nil {
		return e
	}
	ctx := ctxOf(c)
	live, err := v.resolve(ctx, s.now)
	if err != nil {
		return s.dbError(ctx, err)
	}
	if e := s.awaitApplied(ctx, v, live, rp); e != nil {
		return e
	}
	gz := acceptsGzip(r)
	if rp.atSet {
		return s.serveAt(c, v, live, key, rp, gz)
	}
	d, _, err := s.readDoc(ctx, v, live, key, len(rp.after) > 0)
	if err != nil {
		return s.dbError(ctx, err)
	}
	if d.raw == nil {
		return newError(http.StatusNotFound, CodeNotFound, "view %s has no key %q", v.Name, printable(key)).with("key", key)
	}
	return s.serveDoc(c, v, live, docRep{raw: d.raw, version: d.version, hasV: d.hasV, ts: d.ts, hasTS: d.hasTS}, rp.meta, gz)
}

// docRep is one document to serve and its validators.
type docRep struct {
	raw     []byte
	id      string // set for history documents, which hold no _id
	version int64
	hasV    bool
	ts      int64
	hasTS   bool
}

func (s *Server) serveDoc(c echo.Context, v *view, live liveState, d docRep, meta, gz bool) error {
	h := c.Response().Header()
	cacheHeaders(h, v.cacheControl)
	var val validators
	if d.hasV {
		tags := v.generationTags(live.collection)
		tag := tags[0]
		if meta {
			tag = tags[1]
		}
		val.etag = keyETag(d.version, tag, gz)
		h.Set("ETag", val.etag)
	}
	if d.hasTS {
		val.lastMod = time.UnixMilli(d.ts)
	}
	if stop, err := s.conditional(c, routeKey, val); stop || err != nil {
		return err
	}
	if d.hasTS {
		h.Set("Last-Modified", val.lastMod.UTC().Format(http.TimeFormat))
	}
	bp := s.bufs.Get().(*[]byte)
	body := appendDoc((*bp)[:0], d.raw, renderOpts{fields: v.fields, meta: meta, id: d.id})
	err := c.Blob(http.StatusOK, echo.MIMEApplicationJSON, body)
	*bp = body
	s.bufs.Put(bp)
	return err
}

// conditional evaluates the request's preconditions; stop when it answered 304 (or failed).
func (s *Server) conditional(c echo.Context, route string, val validators) (bool, error) {
	rh := c.Request().Header
	if len(rh["If-None-Match"]) == 0 && len(rh["If-Match"]) == 0 && len(rh["If-Modified-Since"]) == 0 && len(rh["If-Unmodified-Since"]) == 0 {
		return false, nil
	}
	status, e := precondition(rh, val)
	if e != nil {
		return true, e
	}
	switch status {
	case http.StatusNotModified:
		s.metrics.conditionalResult(route, "not_modified")
		return true, c.NoContent(http.StatusNotModified)
	case http.StatusPreconditionFailed:
		s.metrics.conditionalResult(route, "failed")
		return true, newError(http.StatusPreconditionFailed, CodePrecondition, "the representation does not match If-Match or If-Unmodified-Since")
	}
	s.metrics.conditionalResult(route, "modified")
	return false, nil
}

// serveAt serves ?at=: the key's state at a time, from the live collection's history.
func (s *Server) serveAt(c echo.Context, v *view, live liveState, key string, rp readParams, gz bool) error {
	ctx := ctxOf(c)
	if v.History <= 0 {
		return newError(http.StatusUnprocessableEntity, CodeNoHistory, "view %s keeps no history, so it cannot answer at=", v.Name).
			with("view", v.Name)
	}
	if oldest := s.now().Add(-v.History); rp.at.Before(oldest) {
		return newError(http.StatusUnprocessableEntity, CodeHistoryExpired, "view %s keeps %s of history: %s is older", v.Name, v.History, rp.at.UTC().Format(time.RFC3339Nano)).
			with("oldest", oldest.UTC().Format(time.RFC3339Nano)).with("retention", v.History.String())
	}
	rec, err := v.readHistory(ctx, live, key, rp.at)
	if err != nil {
		return s.dbError(ctx, err)
	}
	if !rec.found || rec.deleted {
		what := "did not exist"
		if rec.deleted {
			what = "was deleted"
		}
		return newError(http.StatusNotFound, CodeNotFound, "view %s: key %q %s at %s", v.Name, printable(key), what, rp.at.UTC().Format(time.RFC3339Nano)).
			with("key", key).with("at", rp.at.UTC().Format(time.RFC3339Nano))
	}
	return s.serveDoc(c, v, live, docRep{raw: rec.doc, id: key, version: rec.version, hasV: rec.hasV, ts: rec.ts, hasTS: rec.hasTS}, rp.meta, gz)
}

// getList serves GET and HEAD /v1/views/{view}, and watches of it.
func (s *Server) getList(c echo.Context) error {
	r := c.Request()
	if watchQuery(r.URL.RawQuery) {
		if params, e := splitQuery(r.URL.RawQuery, s.cfg.MaxQueryBytes); e == nil {
			if watch, _ := isWatch(params); watch {
				v, e := s.watchedView(c, params)
				if e != nil {
					return e
				}
				return s.watch(c, v, params)
			}
		}
	}
	v, e := s.viewOf(c)
	if e != nil {
		return e
	}
	params, e := splitQuery(r.URL.RawQuery, s.cfg.MaxQueryBytes)
	if e != nil {
		return e
	}
	if watch, e := isWatch(params); e != nil {
		return e
	} else if watch {
		return s.watch(c, v, params)
	}
	lp, e := parseListParams(params, v, s.cfg.MaxWait)
	if e != nil {
		return e
	}
	if e := checkValidators(r.Header); e != nil {
		return e
	}
	binding := lp.binding(v.Name)
	and := bson.A{bson.D{{Key: "_deleted", Value: bson.D{{Key: "$ne", Value: true}}}}}
	for _, cond := range lp.conds {
		and = append(and, cond.filter())
	}
	if lp.cursor != "" {
		ks, e := s.cursors.decode(lp.cursor, binding)
		if e != nil {
			return e
		}
		and = append(and, ks.after(lp.order))
	}
	ctx := ctxOf(c)
	live, err := v.resolve(ctx, s.now)
	if err != nil {
		return s.dbError(ctx, err)
	}
	if e := s.awaitApplied(ctx, v, live, lp.readParams); e != nil {
		return e
	}
	dir := 1
	if lp.order.desc {
		dir = -1
	}
	sort := bson.D{{Key: lp.order.field, Value: dir}}
	if lp.order.field != "_id" {
		sort = append(sort, bson.E{Key: "_id", Value: dir})
	}
	opts := options.Find().SetSort(sort).SetLimit(int64(lp.limit + 1)).SetBatchSize(int32(lp.limit + 1))
	if v.listProjection != nil {
		opts.SetProjection(v.listProjection)
	}
	cur, err := v.db.Collection(live.collection).Find(ctx, bson.D{{Key: "$and", Value: and}}, opts)
	if err != nil {
		return s.dbError(ctx, err)
	}
	// A page holds at most limit documents and MaxPageBytes of them (at least one): past the
	// budget the page ends early and its next link goes on from there.
	var docs []bson.Raw
	size, cut := 0, false
	for cur.Next(ctx) {
		if len(docs) > 0 && size+len(cur.Current) > s.cfg.MaxPageBytes && len(docs) < lp.limit+1 {
			cut = true
			break
		}
		size += len(cur.Current)
		docs = append(docs, append(bson.Raw(nil), cur.Current...))
	}
	err = cur.Err()
	_ = cur.Close(ctx)
	if err != nil {
		return s.dbError(ctx, err)
	}
	next := ""
	if len(docs) > lp.limit || cut {
		docs = docs[:min(len(docs), lp.limit)]
		if ks, ok := keysetOf(docs[len(docs)-1], lp.order); ok {
			next = s.cursors.encode(binding, ks)
		}
	}
	gz := acceptsGzip(r)
	tags := v.generationTags(live.collection)
	tag := tags[0]
	if lp.meta {
		tag = tags[1]
	}
	ids := make([]string, len(docs))
	versions := make([]int64, len(docs))
	for i, d := range docs {
		ids[i], _ = bsonString(d, "_id")
		versions[i], _ = intValue(bsonLookup(d, "_v"))
	}
	val := validators{etag: listETag(tag, ids, versions, next, gz)}
	h := c.Response().Header()
	cacheHeaders(h, v.cacheControl)
	h.Set("ETag", val.etag)
	if !live.at.IsZero() {
		// The page reflects at least every change up to live.at: resolved by a majority read
		// that ended before the page was read.
		h.Set(PositionHeader, s.positions.encode(allAt(v.Database, live.collection, live.at)))
	}
	if stop, err := s.conditional(c, routeList, val); stop || err != nil {
		return err
	}
	if next != "" {
		h.Set("Link", nextLink(r, params, next))
	}
	bp := s.bufs.Get().(*[]byte)
	body := append((*bp)[:0], `{"items":[`...)
	for i, d := range docs {
		if i > 0 {
			body = append(body, ',')
		}
		body = appendDoc(body, d, renderOpts{fields: v.fields, meta: lp.meta})
	}
	body = append(body, ']')
	if next != "" {
		body = append(body, `,"next":`...)
		body = appendString(body, next)
	}
	body = append(body, '}')
	err = c.Blob(http.StatusOK, echo.MIMEApplicationJSON, body)
	*bp = body
	s.bufs.Put(bp)
	return err
}

// nextLink is the RFC 8288 Link to the next page: this request with the next cursor.
func nextLink(r *http.Request, params []param, cursor string) string {
	var b strings.Builder
	b.WriteString("<")
	b.WriteString(r.URL.EscapedPath())
	b.WriteByte('?')
	for _, p := range params {
		if p.name == "cursor" {
			continue
		}
		b.WriteString(url.QueryEscape(p.name))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(p.value))
		b.WriteByte('&')
	}
	b.WriteString("cursor=")
	b.WriteString(cursor)
	b.WriteString(`>; rel="next"`)
	return b.String()
}
