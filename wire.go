package jetbus

// Header names used on the wire. Every client, in any language, reads and writes these.
const (
	HeaderMsgID         = "Nats-Msg-Id"
	HeaderKey           = "x-key"
	HeaderTS            = "x-ts" // Unix milliseconds, decimal
	HeaderSID           = "x-sid"
	HeaderCausedBy      = "x-caused-by" // comma-separated event IDs
	HeaderTags          = "x-tags"      // comma-separated
	HeaderSchemaVersion = "x-schema-version"
	HeaderContentType   = "content-type"

	// The W3C Trace Context (https://www.w3.org/TR/trace-context/) and Baggage
	// (https://www.w3.org/TR/baggage/) headers, exactly these lowercase names: the only
	// headers an event carries that are neither jetbus's nor "x-" custom ones. Publish takes
	// them from the context's span (and jetbus.WithTraceContext, jetbus.WithBaggage), not
	// from WithHeaders; a malformed value is dropped and counted, never an error.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
	HeaderBaggage     = "baggage" // kept only for the keys a Bus allows (opt-in)

	// ContentTypeJSON is the content type of every jetbus event body.
	ContentTypeJSON = "application/json"
)

// Stream metadata keys set on every topic's stream, readable with a stream-info request.
const (
	MetaPartitions = "jetbus.partitions"
	MetaTopic      = "jetbus.topic"
	MetaVersion    = "jetbus.version"
	// MetaKeyed is "true" on a keyed topic's stream: subjects "<topic>.p<n>.<key token>".
	MetaKeyed = "jetbus.keyed"
	// MetaKeepPerKey is how many events per key a keyed topic keeps (0: all within MaxAge).
	MetaKeepPerKey = "jetbus.keep_per_key"
)

// MetaUnordered is "true" in the Metadata of an unordered group's consumers (SubscribeOptions.
// Unordered): no priority policy, so every member of the group pulls them. A group's
// consumers without it are ordered (priority policy pinned_client, group PriorityGroup).
const MetaUnordered = "jetbus.unordered"

// mappedHeaders are the headers that become Event fields instead of Event.Headers.
var mappedHeaders = map[string]bool{
	HeaderKey: true, HeaderTS: true, HeaderSID: true, HeaderCausedBy: true, HeaderTags: true,
}

// IsMappedHeader reports whether name is one of the headers jetbus maps to an Event field
// (x-key, x-ts, x-sid, x-caused-by, x-tags). Such headers cannot be set through WithHeaders.
func IsMappedHeader(name string) bool { return mappedHeaders[name] }
