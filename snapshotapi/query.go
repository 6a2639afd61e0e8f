package snapshotapi

import (
	"crypto/sha256"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The query grammar. Everything a client sends in a query string is parsed here into typed
// values before anything reaches MongoDB: a parameter is either reserved (order, limit,
// cursor, after, wait, meta, at) or the exact name of a declared filter field, and a filter
// value is parsed to that field's type. The filter documents built from the result hold
// only declared field names, the operators below and scalar values, so no query string can
// name a MongoDB operator or an undeclared field.

// Filter operators, as PostgREST spells them.
var operators = map[string]string{
	"eq": "$eq", "ne": "$ne", "gt": "$gt", "gte": "$gte", "lt": "$lt", "lte": "$lte", "in": "$in", "prefix": "$regex",
}

var opNames = []string{"eq", "ne", "gt", "gte", "lt", "lte", "in", "prefix"}

// param is one name=value pair of a query string, unescaped.
type param struct{ name, value string }

// splitQuery unescapes a raw query string into its pairs, in order.
func splitQuery(raw string, maxBytes int) ([]param, *apiError) {
	if len(raw) > maxBytes {
		return nil, newError(400, CodeQueryTooLong, "the query string is %d bytes; at most %d", len(raw), maxBytes).with("max_bytes", maxBytes)
	}
	var out []param
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" {
			continue
		}
		if strings.Contains(pair, ";") {
			return nil, newError(400, CodeBadQuery, "a query string separates parameters with &, not ;")
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			return nil, newError(400, CodeBadQuery, "a parameter name is not URL-encoded correctly: %v", err)
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, badQuery(printable(name), "the value is not URL-encoded correctly: %v", err)
		}
		if name == "" {
			return nil, newError(400, CodeBadQuery, "a parameter has no name")
		}
		if !utf8.ValidString(name) || !utf8.ValidString(value) {
			return nil, badQuery(printable(name), "parameters must be UTF-8")
		}
		out = append(out, param{name, value})
	}
	return out, nil
}

// printable bounds and sanitizes client text quoted back in an error.
func printable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > 64 {
		s = s[:64]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

// position is a read-your-writes token, <partition>:<seq>.
type position struct {
	partition int
	seq       uint64
}

// readParams are the parameters every view read takes.
type readParams struct {
	meta    bool
	after   []position
	wait    time.Duration
	at      time.Time
	atSet   bool
	waitSet bool
}

// condition is one filter: field=op.value.
type condition struct {
	field  string
	op     string // eq ne gt gte lt lte in prefix
	typ    FieldType
	values []any // string, int64, float64, bool or timeValue
	text   string
}

// timeValue is a time filter value: the date, and the string a string field is compared with.
type timeValue struct {
	t time.Time
	s string
}

// order is a list's sort: one field (or _id), then _id in the same direction.
type order struct {
	field string
	desc  bool
}

func (o order) String() string {
	if o.desc {
		return o.field + ".desc"
	}
	return o.field + ".asc"
}

// listParams are a list request's parameters.
type listParams struct {
	readParams
	conds  []condition
	order  order
	limit  int
	cursor string
}

// readParam parses the parameters common to every read; ok false when p is not one of them.
func (rp *readParams) readParam(p param, maxWait time.Duration, partitions int) (bool, *apiError) {
	switch p.name {
	case "meta":
		switch p.value {
		case "1", "true":
			rp.meta = true
		case "0", "false":
		default:
			return true, badQuery("meta", "meta is 1, true, 0 or false; got %q", printable(p.value))
		}
	case "after":
		ps, err := parsePositions(p.value, partitions)
		if err != nil {
			return true, err
		}
		rp.after = ps
	case "wait":
		d, err := time.ParseDuration(p.value)
		if err != nil || d < 0 {
			return true, badQuery("wait", "wait is a duration such as 2s or 500ms; got %q", printable(p.value))
		}
		if d > maxWait {
			return true, badQuery("wait", "wait is at most %s; got %s", maxWait, d).with("max", maxWait.String())
		}
		rp.wait, rp.waitSet = d, true
	default:
		return false, nil
	}
	return true, nil
}

func (rp *readParams) finish() *apiError {
	if rp.waitSet && len(rp.after) == 0 {
		return badQuery("wait", "wait needs after=<partition>:<seq>")
	}
	return nil
}

var positionPattern = regexp.MustCompile(`^(0|[1-9][0-9]{0,8}):([1-9][0-9]{0,19})$`)

// parsePositions parses "<partition>:<seq>[,<partition>:<seq>…]".
func parsePositions(s string, partitions int) ([]position, *apiError) {
	parts := strings.Split(s, ",")
	if len(parts) > MaxPositions {
		return nil, badQuery("after", "after takes at most %d positions; got %d", MaxPositions, len(parts))
	}
	out := make([]position, 0, len(parts))
	for _, part := range parts {
		m := positionPattern.FindStringSubmatch(part)
		if m == nil {
			return nil, badQuery("after", "after is <partition>:<seq> (as Publish and ingress return it), e.g. 3:1042; got %q", printable(part))
		}
		p, _ := strconv.Atoi(m[1])
		seq, err := strconv.ParseUint(m[2], 10, 64)
		if err != nil {
			return nil, badQuery("after", "sequence %q is out of range", printable(m[2]))
		}
		if partitions > 0 && p >= partitions {
			return nil, badQuery("after", "partition %d does not exist: the topic has %d", p, partitions).with("partitions", partitions)
		}
		out = append(out, position{p, seq})
	}
	return out, nil
}

// parseKeyParams parses the parameters of GET /v1/views/{view}/{key}.
func parseKeyParams(params []param, v *view, maxWait time.Duration) (readParams, *apiError) {
	var rp readParams
	seen := map[string]bool{}
	for _, p := range params {
		if seen[p.name] {
			return rp, badQuery(printable(p.name), "%s is given twice", printable(p.name))
		}
		seen[p.name] = true
		ok, err := rp.readParam(p, maxWait, v.Partitions)
		if err != nil {
			return rp, err
		}
		if ok {
			continue
		}
		if p.name == "at" {
			t, err := parseTime(p.value)
			if err != nil {
				return rp, badQuery("at", "at is an RFC 3339 time or Unix milliseconds: %s", err.Error())
			}
			rp.at, rp.atSet = t, true
			continue
		}
		return rp, badQuery(printable(p.name), "unknown parameter %q: a key takes meta, at, after and wait", printable(p.name))
	}
	return rp, rp.finish()
}

// parseListParams parses the parameters of GET /v1/views/{view}.
func parseListParams(params []param, v *view, maxWait time.Duration) (listParams, *apiError) {
	lp := listParams{order: order{field: "_id"}, limit: v.MaxLimit}
	seen := map[string]bool{}
	for _, p := range params {
		if typ, ok := v.Filters[p.name]; ok {
			if len(lp.conds) == MaxFilters {
				return lp, badQuery(p.name, "at most %d filter conditions", MaxFilters)
			}
			c, err := parseCondition(p.name, typ, p.value)
			if err != nil {
				return lp, err
			}
			lp.conds = append(lp.conds, c)
			continue
		}
		if seen[p.name] {
			return lp, badQuery(printable(p.name), "%s is given twice", printable(p.name))
		}
		seen[p.name] = true
		ok, err := lp.readParam(p, maxWait, v.Partitions)
		if err != nil {
			return lp, err
		}
		if ok {
			continue
		}
		switch p.name {
		case "order":
			o, err := parseOrder(p.value, v)
			if err != nil {
				return lp, err
			}
			lp.order = o
		case "limit":
			n, err := strconv.Atoi(p.value)
			if err != nil || n < 1 || len(p.value) > 7 {
				return lp, badQuery("limit", "limit is a whole number from 1 to %d; got %q", v.MaxLimit, printable(p.value)).with("max", v.MaxLimit)
			}
			if n > v.MaxLimit {
				return lp, badQuery("limit", "limit is at most %d for view %s; got %d", v.MaxLimit, v.Name, n).with("max", v.MaxLimit)
			}
			lp.limit = n
		case "cursor":
			lp.cursor = p.value
		case "at":
			return lp, badQuery("at", "at reads one key: /v1/views/%s/{key}?at=…", v.Name)
		case "watch": // false or 0 (isWatch)
		case "since", "ticket":
			return lp, badQuery(p.name, "%s is a parameter of a watch: add watch=true", p.name)
		default:
			return lp, unknownParam(p.name, v)
		}
	}
	return lp, lp.finish()
}

func unknownParam(name string, v *view) *apiError {
	e := badQuery(printable(name), "unknown parameter %q: filter on a declared field (%s) or use order, limit, cursor, after, wait, meta",
		printable(name), strings.Join(v.filterNames, ", "))
	return e.with("filters", v.filterNames)
}

func parseOrder(s string, v *view) (order, *apiError) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 || (s[i+1:] != "asc" && s[i+1:] != "desc") {
		return order{}, badQuery("order", "order is <field>.asc or <field>.desc; got %q", printable(s))
	}
	field, dir := s[:i], s[i+1:]
	if field != "_id" && !slices.Contains(v.Sort, field) {
		return order{}, badQuery("order", "view %s cannot be ordered by %q; it can by: %s", v.Name, printable(field), strings.Join(append([]string{"_id"}, v.Sort...), ", ")).
			with("sort", append([]string{"_id"}, v.Sort...))
	}
	return order{field: field, desc: dir == "desc"}, nil
}

// parseCondition parses "op.value" for field of type typ.
func parseCondition(field string, typ FieldType, s string) (condition, *apiError) {
	opName, rest, ok := strings.Cut(s, ".")
	if !ok || operators[opName] == "" {
		return condition{}, badQuery(field, "a filter is <op>.<value> with op one of %s; got %q", strings.Join(opNames, ", "), printable(s)).
			with("operators", opNames)
	}
	c := condition{field: field, op: opName, typ: typ, text: s}
	var raw []string
	switch opName {
	case "in":
		items, err := splitList(rest)
		if err != nil {
			return c, badQuery(field, "in takes a list: in.(a,b,\"c,d\"): %s", err)
		}
		raw = items
	case "prefix":
		if typ != String {
			return c, badQuery(field, "prefix applies to string fields; %s is a %s", field, typ)
		}
		if strings.IndexByte(rest, 0) >= 0 {
			return c, badQuery(field, "a prefix may not hold a NUL character")
		}
		raw = []string{rest}
	default:
		raw = []string{rest}
	}
	for _, r := range raw {
		val, err := parseValue(typ, r)
		if err != nil {
			return c, badQuery(field, "%s is a %s field: %s", field, typ, err.Error()).with("type", string(typ))
		}
		c.values = append(c.values, val)
	}
	return c, nil
}

// splitList parses "(a,b,"c,d")": items separated by commas, double-quoted when they hold a
// comma, a parenthesis or a quote (\" and \\ escape inside quotes).
func splitList(s string) ([]string, error) {
	if len(s) < 2 || s[0] != '(' || s[len(s)-1] != ')' {
		return nil, errString("the list is not in parentheses")
	}
	s = s[1 : len(s)-1]
	var items []string
	for {
		var item strings.Builder
		if strings.HasPrefix(s, `"`) {
			i := 1
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					item.WriteByte(s[i+1])
					i += 2
					continue
				}
				if c == '"' {
					closed = true
					i++
					break
				}
				item.WriteByte(c)
				i++
			}
			if !closed {
				return nil, errString("a quoted item is not closed")
			}
			s = s[i:]
		} else {
			end := strings.IndexAny(s, ",")
			if end < 0 {
				end = len(s)
			}
			if strings.ContainsAny(s[:end], `"()`) {
				return nil, errString(`quote an item that holds " ( or )`)
			}
			item.WriteString(s[:end])
			s = s[end:]
		}
		items = append(items, item.String())
		if len(items) > MaxInValues {
			return nil, errString("at most " + strconv.Itoa(MaxInValues) + " values")
		}
		if s == "" {
			break
		}
		if s[0] != ',' {
			return nil, errString("items are separated by commas")
		}
		s = s[1:]
	}
	if len(items) == 1 && items[0] == "" {
		return nil, errString("the list is empty")
	}
	return items, nil
}

type errString string

func (e errString) Error() string { return string(e) }

var numberPattern = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// parseValue parses one filter value to typ.
func parseValue(typ FieldType, s string) (any, error) {
	switch typ {
	case String:
		return s, nil
	case Number:
		if len(s) > 64 || !numberPattern.MatchString(s) {
			return nil, errString("want a JSON number, got \"" + printable(s) + "\"")
		}
		if !strings.ContainsAny(s, ".eE") {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				return n, nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, errString("the number \"" + printable(s) + "\" is out of range")
		}
		return f, nil
	case Bool:
		switch s {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, errString("want true or false, got \"" + printable(s) + "\"")
	case Time:
		t, err := parseTime(s)
		if err != nil {
			return nil, err
		}
		str := s
		if !strings.ContainsAny(s, "T:") { // Unix milliseconds: compared with JavaScript's ISO form
			str = t.UTC().Format("2006-01-02T15:04:05.000Z")
		}
		return timeValue{t: t, s: str}, nil
	}
	return nil, errString("unknown type")
}

var unixMsPattern = regexp.MustCompile(`^-?[0-9]{1,15}$`)

// parseTime parses an RFC 3339 time or Unix milliseconds.
func parseTime(s string) (time.Time, error) {
	if unixMsPattern.MatchString(s) {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err == nil {
			return time.UnixMilli(ms).UTC(), nil
		}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errString("want an RFC 3339 time (2026-01-02T15:04:05Z) or Unix milliseconds, got \"" + printable(s) + "\"")
	}
	if y := t.Year(); y < 1 || y > 9999 {
		return time.Time{}, errString("the year is out of range")
	}
	return t, nil
}

// bsonValue is v as it goes into a filter.
func bsonValue(v any) any {
	if tv, ok := v.(timeValue); ok {
		return bson.NewDateTimeFromTime(tv.t)
	}
	return v
}

// filter returns the MongoDB filter of c: only c.field, one operator, scalar values.
func (c condition) filter() bson.D {
	op := operators[c.op]
	switch {
	case c.op == "prefix":
		return bson.D{{Key: c.field, Value: bson.D{{Key: "$regex", Value: bson.Regex{Pattern: "^" + regexp.QuoteMeta(c.values[0].(string))}}}}}
	case c.typ == Time:
		// A time matches a BSON date or, in the string bracket, a string.
		var dates, strs bson.A
		for _, v := range c.values {
			tv := v.(timeValue)
			dates = append(dates, bson.NewDateTimeFromTime(tv.t))
			strs = append(strs, tv.s)
		}
		switch c.op {
		case "eq", "in":
			return bson.D{{Key: c.field, Value: bson.D{{Key: "$in", Value: append(dates, strs...)}}}}
		case "ne":
			return bson.D{{Key: c.field, Value: bson.D{{Key: "$nin", Value: append(dates, strs...)}}}}
		}
		return bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: c.field, Value: bson.D{{Key: op, Value: dates[0]}}}},
			bson.D{{Key: c.field, Value: bson.D{{Key: op, Value: strs[0]}}}},
		}}}
	case c.op == "in":
		vals := make(bson.A, len(c.values))
		for i, v := range c.values {
			vals[i] = v
		}
		return bson.D{{Key: c.field, Value: bson.D{{Key: "$in", Value: vals}}}}
	}
	return bson.D{{Key: c.field, Value: bson.D{{Key: op, Value: c.values[0]}}}}
}

// binding identifies a list query for its cursors: the view, the filters (in any order) and
// the order. A cursor is accepted only by the query it was issued for.
func (lp listParams) binding(view string) [16]byte {
	texts := make([]string, len(lp.conds))
	for i, c := range lp.conds {
		texts[i] = c.field + "\x00" + c.text
	}
	slices.Sort(texts)
	h := sha256.New()
	h.Write([]byte(view + "\x00" + lp.order.String() + "\x00"))
	for _, t := range texts {
		h.Write([]byte(t + "\x01"))
	}
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}
