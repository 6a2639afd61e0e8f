package snapshotapi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// Tickets let a browser watch a view: EventSource cannot send an Authorization header, and
// a long-lived token must never travel in a URL (URLs end up in logs and histories). A
// client with a bearer token asks POST /v1/tickets {"views": [...]} for a ticket: a short
// token (Config.TicketTTL) naming those views, sealed with AES-256-GCM under a key derived
// from Config.CursorKey, which every replica shares (LoadCursorKey), so any replica accepts
// it. A ticket is accepted as ?ticket= on a watch only, at connection time: a stream
// outlives its ticket, and an EventSource reconnecting within the ticket's life reuses
// it. Nothing is stored: a ticket may be used any number of times until it expires, and
// the API never logs query strings.
//
//	base64url( version(1) | nonce(12) | seal( expires, Unix ms (8) | uvarint count | (uvarint len | view)… ) )

const (
	ticketVersion = 1
	// maxTicketLen bounds the text of a ticket before it is opened.
	maxTicketLen = 2048
	// DefaultTicketTTL is how long a ticket is accepted.
	DefaultTicketTTL = 5 * time.Minute
	// routeTickets issues tickets.
	routeTickets = "/v1/tickets"
)

var ticketDomain = []byte("jetbus watch ticket")

type ticketCodec struct{ aead cipher.AEAD }

func newTicketCodec(key []byte) ticketCodec {
	m := hmac.New(sha256.New, key)
	m.Write(ticketDomain)
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return ticketCodec{aead: aead}
}

func (c ticketCodec) encode(views []string, expires time.Time) string {
	plain := binary.BigEndian.AppendUint64(nil, uint64(expires.UnixMilli()))
	plain = binary.AppendUvarint(plain, uint64(len(views)))
	for _, v := range views {
		plain = binary.AppendUvarint(plain, uint64(len(v)))
		plain = append(plain, v...)
	}
	ns := c.aead.NonceSize()
	b := make([]byte, 1+ns, 1+ns+len(plain)+c.aead.Overhead())
	b[0] = ticketVersion
	_, _ = rand.Read(b[1 : 1+ns])
	b = c.aead.Seal(b, b[1:1+ns], plain, b[:1])
	return base64.RawURLEncoding.EncodeToString(b)
}

// decode opens a ticket: the principal it stands for, at now.
func (c ticketCodec) decode(s string, now time.Time) (*principal, *apiError) {
	bad := invalidTicket("the ticket is not one this API issued")
	if len(s) > maxTicketLen {
		return nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	ns := c.aead.NonceSize()
	if err != nil || len(b) < 1+ns+c.aead.Overhead() || b[0] != ticketVersion {
		return nil, bad
	}
	body, err := c.aead.Open(nil, b[1:1+ns], b[1+ns:], b[:1])
	if err != nil || len(body) < 8 {
		return nil, bad
	}
	expires := time.UnixMilli(int64(binary.BigEndian.Uint64(body)))
	rest := body[8:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)) {
		return nil, bad
	}
	rest = rest[k:]
	p := &principal{name: "ticket"}
	for range n {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return nil, bad
		}
		p.views = append(p.views, string(rest[k:k+int(l)]))
		rest = rest[k+int(l):]
	}
	if len(rest) != 0 {
		return nil, bad
	}
	if !now.Before(expires) {
		return nil, invalidTicket("the ticket has expired: get a new one (POST /v1/tickets)")
	}
	return p, nil
}

func invalidTicket(msg string) *apiError {
	return unauthorized("%s", msg).with("param", "ticket").withHeader("WWW-Authenticate", realm+`, error="invalid_token", error_description="`+msg+`"`)
}

// ticketRequest is the body of POST /v1/tickets.
type ticketRequest struct {
	Views []string `json:"views"`
}

// postTicket serves POST /v1/tickets: a ticket for views the bearer token may read.
func (s *Server) postTicket(c echo.Context) error {
	r := c.Request()
	p, e := s.auth.authenticate(r)
	if e != nil {
		return e
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != echo.MIMEApplicationJSON {
		return newError(http.StatusUnsupportedMediaType, CodeBadBody, "the body is JSON: Content-Type: application/json")
	}
	var req ticketRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the request body is over %d bytes", s.cfg.MaxBodyBytes)
		}
		return newError(http.StatusBadRequest, CodeBadBody, `the body is {"views": ["<view>", …]}`)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, CodeBadBody, `the body is one JSON object, {"views": ["<view>", …]}`)
	}
	if len(req.Views) == 0 {
		return newError(http.StatusBadRequest, CodeBadBody, `name the views to watch: {"views": ["<view>", …]}`).with("views", s.viewNames(p))
	}
	seen := map[string]bool{}
	var views []string
	for _, name := range req.Views {
		if s.views[name] == nil {
			return newError(http.StatusNotFound, CodeUnknownView, "no view %q", printable(name)).with("views", s.viewNames(p))
		}
		if e := s.auth.authorize(p, name); e != nil {
			return e
		}
		if !seen[name] {
			seen[name] = true
			views = append(views, name)
		}
	}
	expires := s.now().Add(s.cfg.TicketTTL).Truncate(time.Millisecond)
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, map[string]any{"ticket": s.tickets.encode(views, expires), "views": views,
		"expires": expires.UTC().Format(time.RFC3339Nano)})
}
