package snapshotapi

import (
	"container/list"
	"context"
	"errors"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// GET /v1/views/{view}?watch=true: the list, watched, over Server-Sent Events.
//
// Without a position the stream starts with the documents the list's filters match, in key
// order (event: upsert), read in one snapshot (readConcern snapshot: one cluster time T);
// then one event: synced whose id is the position T; then the changes after T. With
// since=<position> (or Last-Event-ID, which wins, being what a reconnecting EventSource
// sends along the URL it first used) only the changes after it.
//
// Each change is a message "id: <position>\nevent: upsert|delete\ndata: {"key","v","doc"}":
// doc is rendered as the key route renders it (and only for upserts); a delete of a removed
// document has no v. The id of a message is the position of the change it carries, so
// resuming there gets exactly the changes after it (changes.go). A filtered watch applies
// its filters to each changed document (match.go): one that stops matching is a delete for
// that client, one that starts matching an upsert. A comment (": keep-alive") goes out every
// Config.KeepAlive; when changes that concerned the client went by meanwhile, it carries the
// id they reached, so a client resumes from there.
//
// A client that reads more slowly than the changes come has them wait in a buffer of
// Config.WatchBuffer keys: a key's newer change replaces its waiting one and goes to the
// back, so messages go out in the order of their positions and the versions of a key only
// increase — a slow client gets the latest version of a key, never an older one after a
// newer one. When the buffer is full, the client's reading of the hub's ring waits where
// it is; once the ring drops a change the client has not read (it is Config.WatchWindow
// behind, or past Config.WatchWindowBytes) the client gets "event: overflow" and is
// disconnected: it resumes with Last-Event-ID, and nothing waits for it. When the ring drops
// a change the watch's drainer had not read although the buffer had room (the drainer was
// held up: the process short of CPU), the watch goes on through a change stream of its own
// from where it was, as a resumed watch does (catchUp, within Config.MaxCatchUps).

// watchBatch bounds the messages of one write.
const (
	watchBatch      = 256
	watchBatchBytes = 256 << 10
)

// watchParams are a watch's parameters.
type watchParams struct {
	conds  []condition
	meta   bool
	since  string
	ticket bool
}

// isWatch reports whether a list request asks to watch: watch=true or 1. Any other value
// but false and 0 is a 400.
func isWatch(params []param) (bool, *apiError) {
	for _, p := range params {
		if p.name != "watch" {
			continue
		}
		switch p.value {
		case "true", "1":
			return true, nil
		case "false", "0":
			return false, nil
		}
		return false, badQuery("watch", "watch is true, 1, false or 0; got %q", printable(p.value))
	}
	return false, nil
}

// watchQuery reports whether a raw query string may ask to watch: a stream is not gzipped
// (each event must reach the client when written).
func watchQuery(raw string) bool {
	return strings.Contains(raw, "watch=true") || strings.Contains(raw, "watch=1")
}

// IsWatch reports whether r is a watch (GET /v1/views/{view}?watch=true): a stream that
// lasts as long as its client stays, bounded by Config.MaxWatchers. A server that bounds
// the requests it serves at once leaves watches out of that bound (the processes'
// http.max_requests does).
func IsWatch(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/views/")
	if !ok || rest == "" || strings.Contains(rest, "/") || r.Method != http.MethodGet || !watchQuery(r.URL.RawQuery) {
		return false
	}
	params, e := splitQuery(r.URL.RawQuery, DefaultMaxQueryBytes)
	if e != nil {
		return false
	}
	w, e := isWatch(params)
	return e == nil && w
}

// parseWatchParams parses the parameters of a watch: filters, since, meta, ticket.
func parseWatchParams(params []param, v *view) (watchParams, *apiError) {
	var wp watchParams
	seen := map[string]bool{}
	for _, p := range params {
		if typ, ok := v.Filters[p.name]; ok {
			if len(wp.conds) == MaxFilters {
				return wp, badQuery(p.name, "at most %d filter conditions", MaxFilters)
			}
			c, err := parseCondition(p.name, typ, p.value)
			if err != nil {
				return wp, err
			}
			wp.conds = append(wp.conds, c)
			continue
		}
		if seen[p.name] {
			return wp, badQuery(printable(p.name), "%s is given twice", printable(p.name))
		}
		seen[p.name] = true
		switch p.name {
		case "watch":
		case "since":
			wp.since = p.value
		case "ticket":
			wp.ticket = true
		case "meta":
			switch p.value {
			case "1", "true":
				wp.meta = true
			case "0", "false":
			default:
				return wp, badQuery("meta", "meta is 1, true, 0 or false; got %q", printable(p.value))
			}
		case "order", "limit", "cursor", "after", "wait", "at":
			return wp, badQuery(p.name, "a watch takes filters, since and meta, not %s: it streams the whole filtered list in key order", p.name)
		default:
			e := badQuery(printable(p.name), "unknown parameter %q: filter on a declared field (%s) or use since, meta",
				printable(p.name), strings.Join(v.filterNames, ", "))
			return wp, e.with("filters", v.filterNames)
		}
	}
	return wp, nil
}

// acceptsEventStream reports whether the request's Accept allows text/event-stream (no
// Accept does).
func acceptsEventStream(r *http.Request) bool {
	vals := r.Header.Values("Accept")
	if len(vals) == 0 {
		return true
	}
	for _, v := range vals {
		for _, part := range strings.Split(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			if q, ok := params["q"]; ok && strings.Trim(q, "0.") == "" {
				continue // q=0: not acceptable
			}
			switch mt {
			case "text/event-stream", "text/*", "*/*":
				return true
			}
		}
	}
	return false
}

// watcher is one client's watch.
type watcher struct {
	s      *Server
	v      *view
	ctx    context.Context
	conds  []condition
	fields []string // the fields whose change may change whether a document matches
	meta   bool
	bound  int
	from   streamPos // the changes the client has: those at or before from
	coll   string    // the generation (live collection) w reads
	// binding identifies the watch's filters, for the positions of snapshots and switches.
	binding [16]byte
	// joinTS: changes at or before it may follow skipped ones the client never had, so their
	// changed fields are unknown (a resumed watch).
	joinTS bson.Timestamp
	// unknown: keys whose next change in the ring has changed fields unknown to the client
	// (w's own stream skipped an update of each before w moved to the ring: see join).
	unknown map[string]bool
	ws      *watchSeries
	h       *hub
	src     *changeSource // catching up, before the ring
	cursor  uint64
	// queued: w is to catch up on a change stream of its own from catchFrom once it has a
	// place among the catch-ups (slot: it holds one); rejoin: because its drainer fell behind
	// the ring, not its client; catchWhy: the reason counted when it opens that stream.
	queued, slot, rejoin bool
	catchFrom            streamPos
	catchWhy             string

	mu        sync.Mutex
	pending   map[string]*list.Element
	order     list.List
	processed streamPos // every change up to it was applied (when nothing is pending)
	lastID    streamPos // the position of the last id sent
	overflow  bool
	end       error         // why the watch ends (the hub failed, the stream expired)
	ready     chan struct{} // something to write
	space     chan struct{} // the writer took some
}

type pendingMsg struct {
	ch   *change
	kind string // "upsert" or "delete"
}

func (s *Server) newWatcher(ctx context.Context, v *view, wp watchParams, from streamPos, ws *watchSeries) *watcher {
	w := &watcher{s: s, v: v, ctx: ctx, ws: ws, conds: wp.conds, meta: wp.meta, bound: s.cfg.WatchBuffer, from: from,
		pending: map[string]*list.Element{}, processed: from, lastID: from,
		ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
	w.coll = from.coll
	w.binding = listParams{conds: wp.conds, order: order{field: "_id"}}.binding(v.Name)
	w.fields = []string{"_deleted"}
	for _, c := range wp.conds {
		w.fields = append(w.fields, c.field)
	}
	return w
}

// attach makes w read h from its position: from the ring when it holds every change after
// it, otherwise from a change stream of its own until it meets the ring. That stream is
// opened now when a place among the catch-ups is free (so that a position no longer
// resumable is a status), else by the drainer once one is (catchups).
func (w *watcher) attach(ctx context.Context, h *hub) error {
	w.h = h
	if c, ok := h.seek(w.from); ok {
		w.cursor = c
		return nil
	}
	w.catchFrom, w.catchWhy = w.from, "resumed"
	if !w.s.catchups.tryAcquire() {
		w.queued = true
		return nil
	}
	w.slot = true
	src, err := w.s.openSource(ctx, w.from)
	if err != nil {
		w.releaseSlot()
		return err
	}
	w.src = src
	w.ws.caughtUp("resumed")
	return nil
}

// letGo closes w's own change stream and gives back its place among the catch-ups, when
// it has them: the watch ended, or never started streaming.
func (w *watcher) letGo() {
	if w.src != nil {
		w.src.close(w.ctx)
		w.src = nil
	}
	w.releaseSlot()
}

// releaseSlot gives back w's place among the catch-ups, if it holds one.
func (w *watcher) releaseSlot() {
	if w.slot {
		w.slot = false
		w.s.catchups.release()
	}
}

// openCatchUp waits for a place among the catch-ups (the client gets keep-alive comments
// meanwhile), then opens w's change stream from catchFrom; false when the watch ended.
func (w *watcher) openCatchUp() bool {
	if !w.s.catchups.acquire(w.ctx, w.s.metrics) {
		return false
	}
	w.slot, w.queued = true, false
	if w.rejoin {
		// Changes up to now may follow updates skipped before catchFrom, which this
		// stream will not see: their changed fields are unknown to it (as for a resume).
		ts, err := w.s.clusterTime(w.ctx)
		if err != nil {
			if w.ctx.Err() == nil {
				w.stop(false, err)
			}
			return false
		}
		w.joinTS, w.rejoin = ts, false
	}
	src, err := w.s.openSource(w.ctx, w.catchFrom)
	if err != nil {
		if w.ctx.Err() == nil {
			w.stop(false, err)
		}
		return false
	}
	w.src = src
	w.ws.caughtUp(w.catchWhy)
	return true
}

// kindOf says what a change read from the stream is to w: an upsert, a delete, or nothing
// (""): the client has it, or it does not concern the client.
func (w *watcher) kindOf(ch *change) string {
	if !w.from.less(ch.pos) {
		return ""
	}
	return w.classify(ch)
}

// classify says what a change is to w: an upsert, a delete, or nothing ("").
func (w *watcher) classify(ch *change) string {
	switch ch.kind {
	case changeUpsert:
		if matchAll(ch.doc, w.conds) {
			return "upsert"
		}
		if w.relevant(ch) {
			return "delete"
		}
	case changeMarker:
		if w.relevant(ch) {
			return "delete"
		}
	case changeRemoved:
		return "delete"
	}
	return ""
}

// relevant reports whether ch may have changed whether its document matched: it changed a
// field the filters read (or _deleted), or what it changed is unknown.
func (w *watcher) relevant(ch *change) bool {
	if ch.paths == nil || !tsBefore(w.joinTS, ch.pos.ts) || w.unknown[ch.key] {
		return true
	}
	for _, p := range ch.paths {
		for _, f := range w.fields {
			if related(p, f) {
				return true
			}
		}
	}
	return false
}

// offer puts ch in w's buffer, replacing the key's waiting change (which then goes to the
// back). It reports false, putting nothing, when the buffer is full and ch's key has
// nothing waiting: the caller holds ch back until the writer made room.
func (w *watcher) offer(ch *change) bool {
	kind := w.kindOf(ch)
	if kind == "" {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.pending[ch.key]; e != nil {
		w.order.Remove(e)
	} else if len(w.pending) >= w.bound {
		return false
	}
	w.pending[ch.key] = w.order.PushBack(pendingMsg{ch: ch, kind: kind})
	select {
	case w.ready <- struct{}{}:
	default:
	}
	return true
}

// setProcessed records that every change up to p was applied.
func (w *watcher) setProcessed(p streamPos) {
	w.mu.Lock()
	if w.processed.less(p) {
		w.processed = p
	}
	w.mu.Unlock()
}

// stop ends the watch: overflow, or err.
func (w *watcher) stop(overflow bool, err error) {
	w.mu.Lock()
	if overflow {
		if !w.overflow {
			w.ws.ended("overflow") // counted when found, though the client learns it only when it reads again
		}
		w.overflow = true
	} else if w.end == nil {
		w.end = err
	}
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// drain copies the changes of w's source into its buffer until the watch ends. When the
// buffer is full it stops where it is, and goes on when the writer made room; if the
// hub's ring drops a change it has not read meanwhile, the client is too slow: overflow.
// When the view's live generation changes it follows it (switch.go).
func (w *watcher) drain() {
	defer w.letGo()
	for {
		if w.queued && !w.openCatchUp() {
			return
		}
		if w.src != nil {
			ok := w.catchUp()
			w.src.close(w.ctx)
			w.src = nil
			w.releaseSlot()
			if !ok {
				return
			}
		}
		if !w.drainRing() {
			return
		}
	}
}

// drainRing reads the hub's ring until the watch ends (false), moved to another
// generation (true), or fell behind the ring while its buffer had room (true, queued): its
// drainer was held up, not its client, which goes on from the same place through a change
// stream of its own (catchUp) instead of being cut off.
func (w *watcher) drainRing() bool {
	checked := time.Now()
	full := false // the last read stopped at a full buffer
	for {
		if !w.s.drainGate(w.ctx) {
			return false
		}
		chs, next, head, wake, lost, err := w.h.read(w.cursor)
		switch {
		case err != nil:
			w.stop(false, err)
			return false
		case lost && full:
			w.stop(true, nil) // its client reads too slowly
			return false
		case lost:
			w.mu.Lock()
			w.catchFrom = w.processed // every change up to it was offered, none after
			w.mu.Unlock()
			w.queued, w.rejoin, w.catchWhy = true, true, "behind"
			return true
		}
		i := 0
		for i < len(chs) && w.offer(chs[i]) {
			delete(w.unknown, chs[i].key)
			i++
		}
		var space <-chan struct{}
		if i == len(chs) {
			w.cursor = next
			w.setProcessed(head)
		} else {
			w.cursor += uint64(i)
			space = w.space
		}
		full = space != nil
		if time.Since(checked) >= time.Second {
			checked = time.Now()
			if live, ok := w.v.peek(w.s.hubsCtx, w.s.now, w.s.cfg.RequestTimeout); ok && live.collection != w.coll {
				if err := w.follow(live); err != nil {
					if w.ctx.Err() == nil {
						w.stop(errors.Is(err, errOverflow), err)
					}
					return false
				}
				return true
			}
		}
		select {
		case <-wake:
		case <-space:
		case <-w.ctx.Done():
			return false
		}
	}
}

// catchUp reads w's own change stream until it meets the hub's ring; false when the watch
// ended. A full buffer holds the stream back (it is the client's own), unless other watches
// wait for a place among the catch-ups: then the client, too slow to hold one, gets an
// overflow and resumes later in line.
func (w *watcher) catchUp() bool {
	for {
		if !w.s.drainGate(w.ctx) {
			return false
		}
		r0 := w.h.received()
		ch, emit, err := w.src.next(w.ctx)
		if err != nil {
			if w.ctx.Err() != nil {
				return false
			}
			if expired(err) || errors.Is(err, errCollectionGone) {
				w.stop(false, err)
				return false
			}
			w.src.close(w.ctx)
			src, rerr := reopenSource(w.ctx, w.s, w.src)
			if rerr != nil {
				if w.ctx.Err() == nil {
					w.stop(false, rerr)
				}
				return false
			}
			w.src = src
			continue
		}
		if ch == nil {
			if c, ok := w.h.joinIdle(r0, w.src.head); ok {
				w.join(c)
				w.setProcessed(w.src.head)
				return true
			}
			continue
		}
		if emit {
			for !w.offer(ch) {
				arrived := w.s.catchups.arrivals()
				if w.s.catchups.waiting() > 0 {
					w.stop(true, nil) // its client is too slow to hold a place others wait for
					return false
				}
				select {
				case <-arrived:
				case <-w.space:
				case <-w.ctx.Done():
					return false
				}
			}
		}
		w.setProcessed(ch.pos)
		if c, ok := w.h.joinAt(ch.pos); ok {
			w.join(c)
			return true
		}
	}
}

// join moves w from its own stream to the hub's ring at cursor. The keys of the updates
// its stream skipped without a later change of theirs (the document had moved on when the
// stream looked it up) keep what the stream knew: the fields their next change changed are
// unknown to the client. The ring's copy of that change says what it changed after the
// update skipped here, which the hub may have sent: a second tombstone changes only the
// version, and a client that never had the first would never learn of the delete.
func (w *watcher) join(cursor uint64) {
	w.cursor = cursor
	for k := range w.src.dirty {
		if w.unknown == nil {
			w.unknown = map[string]bool{}
		}
		w.unknown[k] = true
	}
}

// take removes the next messages to write from the buffer, and counts them.
func (w *watcher) take(b []byte) ([]byte, int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, deletes, taken := 0, 0, 0
	for e := w.order.Front(); e != nil && taken < watchBatch && len(b) < watchBatchBytes; e = w.order.Front() {
		taken++
		m := w.order.Remove(e).(pendingMsg)
		delete(w.pending, m.ch.key)
		b = append(b, m.ch.message(w.s, m.kind, w.v.fields, w.meta)...)
		w.lastID = m.ch.pos
		switch m.kind {
		case "upsert":
			n++
		case "delete":
			n++
			deletes++
		}
	}
	if taken > 0 {
		select {
		case w.space <- struct{}{}:
		default:
		}
	}
	if w.order.Len() > 0 {
		select {
		case w.ready <- struct{}{}:
		default:
		}
	}
	return b, n - deletes, deletes
}

// keepAlive returns the keep-alive comment, with the id reached when nothing is pending and
// changes went by since the last id.
func (w *watcher) keepAlive(b []byte) []byte {
	b = append(b, ": keep-alive\n"...)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.order.Len() == 0 && w.lastID.less(w.processed) {
		b = append(b, "id: "...)
		b = append(b, w.s.positions.encode(w.processed)...)
		b = append(b, '\n')
		w.lastID = w.processed
	}
	return append(b, '\n')
}

// watchedView returns the view of a watch, after authenticating it by its ticket
// (?ticket=, for browsers: see ticket.go) or its bearer token, and authorizing it.
func (s *Server) watchedView(c echo.Context, params []param) (*view, *apiError) {
	r := c.Request()
	ticket, hasTicket := "", false
	for _, p := range params {
		if p.name == "ticket" {
			ticket, hasTicket = p.value, true
		}
	}
	if !hasTicket {
		return s.viewOf(c)
	}
	if len(r.Header.Values("Authorization")) > 0 {
		return nil, badQuery("ticket", "send a ticket or an Authorization header, not both")
	}
	p, e := s.tickets.decode(ticket, s.now())
	if e != nil {
		return nil, e
	}
	name, e := pathParam(c, "view")
	if e != nil {
		return nil, e
	}
	v := s.views[name]
	if v == nil {
		return nil, newError(http.StatusNotFound, CodeUnknownView, "no view %q", printable(name)).with("views", p.views)
	}
	if !p.may(name) {
		return nil, newError(http.StatusForbidden, CodeForbidden, "the ticket is for other views (%s): get one for %s", strings.Join(p.views, ", "), name).
			with("view", name).withHeader("WWW-Authenticate", realm+`, error="insufficient_scope", scope="`+name+`"`)
	}
	return v, nil
}

// watch serves a watch of view v.
func (s *Server) watch(c echo.Context, v *view, params []param) error {
	r := c.Request()
	if r.Method != http.MethodGet {
		return badQuery("watch", "a watch is a GET (a stream has no headers of its own to show)")
	}
	if !acceptsEventStream(r) {
		return newError(http.StatusNotAcceptable, CodeNotAcceptable, "a watch answers text/event-stream: accept it (Accept: text/event-stream)")
	}
	wp, e := parseWatchParams(params, v)
	if e != nil {
		return e
	}
	since, param := wp.since, "since"
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		since, param = id, "Last-Event-ID"
	}
	var from *streamPos
	if since != "" {
		p, e := s.positions.decode(since, param)
		if e != nil {
			return e
		}
		if p.db != v.Database {
			return badPosition(param, "the position is of another view")
		}
		from = &p
	}
	binding := listParams{conds: wp.conds, order: order{field: "_id"}}.binding(v.Name)
	if from != nil && (from.snapshot || from.prev != "") && from.binding != binding {
		return badPosition(param, "the position belongs to another watch: keep the filters of the request that returned it")
	}
	setup := ctxOf(c)
	live, err := v.resolve(setup, s.now)
	if err != nil {
		return s.dbError(setup, err)
	}
	gen := live // the generation the watch starts on
	if from != nil && from.coll != live.collection {
		// A position of a previous generation: resumed there, then moved to the live one
		// (switch.go), while that generation exists.
		gen = liveState{collection: from.coll}
	}
	if from != nil && (from.coll != live.collection || from.prev != "") {
		for _, coll := range []string{from.coll, from.prev} {
			if coll == "" {
				continue
			}
			if ok, err := collectionExists(setup, v.db, coll); err != nil {
				return s.dbError(setup, err)
			} else if !ok {
				return positionExpired(param, "view %s was rebuilt since this position, and the generation it names is gone: start again without since", v.Name)
			}
		}
	}
	if n := s.watchers.Add(1); n > int64(s.cfg.MaxWatchers) {
		s.watchers.Add(-1)
		return newError(http.StatusServiceUnavailable, CodeUnavailable, "too many watches are streaming; try again").withHeader("Retry-After", "1")
	}
	defer s.watchers.Add(-1)
	ws := s.metrics.watch(v.Name)
	ws.started()
	defer ws.stopped()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := &watchStream{s: s, c: c, v: v, rc: http.NewResponseController(c.Response()), ctx: ctx, cancel: cancel, meta: wp.meta, ws: ws}

	// Open everything that can fail before the answer starts, so that a failure is a status.
	var snap *snapshotRead
	var switching []*change // the rest of a switch cut off midway
	var start streamPos
	switch {
	case from == nil || from.snapshot:
		snap, err = s.openSnapshot(setup, v, gen, wp, from)
		if err != nil {
			return s.watchOpenError(setup, param, err)
		}
		defer snap.close()
		start = allAt(v.Database, gen.collection, snap.ts)
		if !gen.at.IsZero() && tsBefore(gen.at, snap.ts) {
			start = allAt(v.Database, gen.collection, gen.at) // a hub started now begins there
		}
	case from.prev != "":
		switching, err = s.resumeSwitch(setup, v, wp, *from)
		if err != nil {
			return s.watchOpenError(setup, param, err)
		}
		start = allAt(v.Database, from.coll, from.ts)
	default:
		start = *from
	}
	h, err := s.acquireHub(setup, start)
	if err != nil {
		return s.watchOpenError(setup, param, err)
	}
	var w *watcher
	defer func() {
		if w != nil {
			w.h.release() // the hub it holds now: it may have moved to another generation
		} else {
			h.release()
		}
	}()
	if snap == nil {
		wfrom := *from
		if from.prev != "" {
			wfrom = start
		}
		nw := s.newWatcher(ctx, v, wp, wfrom, ws)
		// Changes up to now may follow skipped ones this client never had: their changed
		// fields are unknown to it.
		if nw.joinTS, err = s.clusterTime(setup); err != nil {
			return s.dbError(setup, err)
		}
		if err := nw.attach(setup, h); err != nil {
			return s.watchOpenError(setup, param, err)
		}
		w = nw
		for _, ch := range switching {
			w.pending[ch.key] = w.order.PushBack(pendingMsg{ch: ch, kind: diffKind(ch)})
		}
		if len(switching) > 0 {
			w.pending[switchedKey] = w.order.PushBack(pendingMsg{ch: &change{pos: start, key: switchedKey}, kind: "switched"})
			w.ready <- struct{}{}
		}
	}

	hd := c.Response().Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	c.Response().WriteHeader(http.StatusOK)
	if err := st.flush(nil); err != nil {
		if w != nil {
			w.letGo() // its drainer never runs: the stream and the place it opened go now
		}
		return nil
	}
	if snap != nil {
		err := st.sendSnapshot(snap)
		snap.close() // not held for the life of the stream
		if err != nil {
			return nil // the client is gone, or too slow; or MongoDB failed mid-way (logged)
		}
		nw := s.newWatcher(ctx, v, wp, allAt(v.Database, gen.collection, snap.ts), ws)
		if err := nw.attach(ctx, h); err != nil {
			st.disconnect(err)
			return nil
		}
		w = nw
	}
	return st.run(w)
}

// watchOpenError answers a failure to open a watch: 410 for a position no longer resumable.
func (s *Server) watchOpenError(ctx context.Context, param string, err error) error {
	switch {
	case expired(err):
		return positionExpired(param, "the position is older than what can be resumed (the oplog, or the snapshot history, no longer holds it): start again without since")
	case errors.Is(err, errSwitchExpired):
		return positionExpired(param, "the view was rebuilt since this position, and the new generation does not follow on from it: start again without since")
	case errors.Is(err, errShuttingDown):
		return newError(http.StatusServiceUnavailable, CodeUnavailable, "the server is shutting down").withHeader("Retry-After", "1")
	}
	return s.dbError(ctx, err)
}

func positionExpired(param, format string, args ...any) *apiError {
	return newError(http.StatusGone, CodePositionExpired, format, args...).with("param", param)
}

// clusterTime returns a cluster time at least as late as every change committed before
// the call.
func (s *Server) clusterTime(ctx context.Context) (bson.Timestamp, error) {
	sess, err := s.mongo.StartSession()
	if err != nil {
		return bson.Timestamp{}, err
	}
	defer sess.EndSession(context.WithoutCancel(ctx))
	if err := s.mongo.Database("admin").RunCommand(mongo.NewSessionContext(ctx, sess), bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		return bson.Timestamp{}, err
	}
	if ct := sess.ClusterTime(); ct != nil {
		if t, i, ok := bsoncore.Document(ct).Lookup("$clusterTime", "clusterTime").TimestampOK(); ok {
			return bson.Timestamp{T: t, I: i}, nil
		}
	}
	if ot := sess.OperationTime(); ot != nil {
		return *ot, nil
	}
	return bson.Timestamp{}, errors.New("snapshotapi: MongoDB reports no cluster time (a watch needs a replica set)")
}

// snapshotRead is the documents a watch starts with, read at one cluster time.
type snapshotRead struct {
	sess    *mongo.Session
	cur     *mongo.Cursor
	ts      bson.Timestamp
	binding [16]byte
	coll    string
	closed  bool
}

// close ends the read (its cursor, which holds its last batch, and its session); again
// does nothing.
func (sr *snapshotRead) close() {
	if sr.closed {
		return
	}
	sr.closed = true
	ctx := context.Background()
	_ = sr.cur.Close(ctx)
	sr.sess.EndSession(ctx)
	sr.cur, sr.sess = nil, nil // a closed cursor still holds its batch
}

// openSnapshot starts the snapshot read of a watch (or goes on with one at its position).
func (s *Server) openSnapshot(ctx context.Context, v *view, live liveState, wp watchParams, from *streamPos) (*snapshotRead, error) {
	so := options.Session().SetSnapshot(true)
	and := bson.A{bson.D{{Key: "_deleted", Value: bson.D{{Key: "$ne", Value: true}}}}}
	for _, cond := range wp.conds {
		and = append(and, cond.filter())
	}
	if from != nil {
		so.SetSnapshotTime(from.ts)
		and = append(and, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: from.after}}}})
	}
	sess, err := s.mongo.StartSession(so)
	if err != nil {
		return nil, err
	}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(1000)
	if v.listProjection != nil {
		opts.SetProjection(v.listProjection)
	}
	cur, err := v.db.Collection(live.collection).Find(mongo.NewSessionContext(ctx, sess), bson.D{{Key: "$and", Value: and}}, opts)
	if err != nil {
		sess.EndSession(context.WithoutCancel(ctx))
		return nil, err
	}
	sr := &snapshotRead{sess: sess, cur: cur, ts: sess.SnapshotTime(), coll: live.collection,
		binding: listParams{conds: wp.conds, order: order{field: "_id"}}.binding(v.Name)}
	if sr.ts.IsZero() {
		sr.close()
		return nil, errors.New("snapshotapi: MongoDB reported no atClusterTime for a snapshot read (a watch needs MongoDB 5.0 or later)")
	}
	return sr, nil
}

// watchStream writes a watch's events.
type watchStream struct {
	s      *Server
	c      echo.Context
	v      *view
	rc     *http.ResponseController
	ctx    context.Context
	cancel context.CancelFunc
	meta   bool
	ws     *watchSeries
}

// writeBufs are the buffers in which streams assemble what they write: taken for one write
// and given back, so that an idle stream holds none (a snapshot's or a burst's buffer,
// up to watchBatchBytes and a message, would otherwise stay with each stream for its life).
var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getWriteBuf() *[]byte { return writeBufs.Get().(*[]byte) }

// putWriteBuf gives back a buffer, with what was appended to it as b; an outsized one (a
// huge document) goes to the collector.
func putWriteBuf(p *[]byte, b []byte) {
	if cap(b) > 2*watchBatchBytes {
		return
	}
	*p = b[:0]
	writeBufs.Put(p)
}

// flush writes b and flushes it, within the write deadline.
func (st *watchStream) flush(b []byte) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.s.cfg.RequestTimeout))
	if len(b) > 0 {
		if _, err := st.c.Response().Write(b); err != nil {
			return err
		}
	}
	return st.rc.Flush()
}

// sendSnapshot streams the snapshot's documents, then synced.
func (st *watchStream) sendSnapshot(sr *snapshotRead) error {
	s, v := st.s, st.v
	bp := getWriteBuf()
	b := (*bp)[:0]
	defer func() { putWriteBuf(bp, b) }()
	meta := st.meta
	n := 0
	for sr.cur.Next(st.ctx) {
		raw := bsoncore.Document(sr.cur.Current)
		key, ok := raw.Lookup("_id").StringValueOK()
		if !ok {
			continue
		}
		ver, hasV := intValue(raw.Lookup("_v"))
		id := s.positions.encode(streamPos{db: v.Database, coll: sr.coll, ts: sr.ts, snapshot: true, binding: sr.binding, after: key})
		b = appendMessage(b, id, "upsert", key, ver, hasV, raw, renderOpts{fields: v.fields, meta: meta})
		n++
		if len(b) >= watchBatchBytes || sr.cur.RemainingBatchLength() == 0 {
			if err := st.flush(b); err != nil {
				st.failed(err)
				return err
			}
			st.ws.sent(n, 0, 0)
			b, n = b[:0], 0
		}
	}
	if err := sr.cur.Err(); err != nil {
		if st.ctx.Err() == nil {
			s.log.Warn("watch: the snapshot read failed; the client starts again", "view", v.Name, "error", err)
			st.disconnect(err)
		}
		return err
	}
	b = append(b, "id: "...)
	b = append(b, s.positions.encode(allAt(v.Database, sr.coll, sr.ts))...)
	b = append(b, "\nevent: synced\ndata: {}\n\n"...)
	if err := st.flush(b); err != nil {
		st.failed(err)
		return err
	}
	st.ws.sent(n, 0, 1)
	return nil
}

// failed counts a write that failed past its deadline (a client that stopped reading);
// one that failed because the client left is not the server's doing.
func (st *watchStream) failed(err error) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		st.ws.ended("stalled")
	}
}

// disconnect writes the event that ends a stream for a reason of the server's.
func (st *watchStream) disconnect(err error) {
	code, msg, reason := CodeUnavailable, "the stream ended: resume with Last-Event-ID", "unavailable"
	switch {
	case expired(err):
		code, msg, reason = CodePositionExpired, "the stream's position is no longer resumable: start again without since", "expired"
	case errors.Is(err, errSwitchExpired):
		code, msg, reason = CodePositionExpired, "the view was rebuilt, and its new generation does not follow on from the one this stream read: start again without since", "expired"
	case errors.Is(err, errShuttingDown):
		msg, reason = "the server is shutting down: resume with Last-Event-ID", "shutdown"
	case errors.Is(err, errCollectionGone):
		msg = "the view's collection is gone: resume with Last-Event-ID"
	}
	st.ws.ended(reason)
	_ = st.flush(appendEndEvent(nil, "disconnect", code, msg))
}

// appendEndEvent appends an event that ends a stream: data in the error shape.
func appendEndEvent(b []byte, event, code, msg string) []byte {
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\ndata: {\"error\":{\"code\":"...)
	b = appendString(b, code)
	b = append(b, `,"message":`...)
	b = appendString(b, msg)
	return append(b, ",\"details\":{}}}\n\n"...)
}

// run streams w's changes until the client leaves or the watch ends.
func (st *watchStream) run(w *watcher) error {
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		w.drain()
	}()
	defer func() {
		st.cancel()
		<-drained
	}()
	ka := time.NewTicker(st.s.cfg.KeepAlive)
	defer ka.Stop()
	for {
		select {
		case <-st.ctx.Done():
			return nil
		case <-ka.C:
			bp := getWriteBuf()
			b := w.keepAlive((*bp)[:0])
			err := st.flush(b)
			putWriteBuf(bp, b)
			if err != nil {
				st.failed(err)
				return nil
			}
			continue
		case <-w.ready:
		}
		w.mu.Lock()
		overflow, end := w.overflow, w.end
		w.mu.Unlock()
		if overflow {
			_ = st.flush(appendEndEvent(nil, "overflow", CodeOverflow,
				"this client reads more slowly than the view changes: resume with Last-Event-ID"))
			return nil
		}
		bp := getWriteBuf()
		b, ups, dels := w.take((*bp)[:0])
		if len(b) > 0 {
			err := st.flush(b)
			putWriteBuf(bp, b)
			if err != nil {
				st.failed(err)
				return nil // stalled past the write deadline, or gone
			}
			st.ws.sent(ups, dels, 0)
			ka.Reset(st.s.cfg.KeepAlive)
			continue
		}
		putWriteBuf(bp, b)
		if end != nil {
			st.disconnect(end)
			return nil
		}
	}
}
