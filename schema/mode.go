package schema

import (
	"fmt"
	"strings"
)

// Mode is a compatibility mode, as Confluent Schema Registry defines them. The zero value
// means "not set": the topic's or the registry's default applies.
type Mode string

// Compatibility modes. BACKWARD: consumers using the new schema can read data written with
// the previous one (the new schema accepts everything the previous accepted). FORWARD:
// consumers using the previous schema can read data written with the new one. FULL: both.
// The _TRANSITIVE variants check against every previous version instead of the latest only.
const (
	ModeNone               Mode = "NONE"
	ModeBackward           Mode = "BACKWARD"
	ModeBackwardTransitive Mode = "BACKWARD_TRANSITIVE"
	ModeForward            Mode = "FORWARD"
	ModeForwardTransitive  Mode = "FORWARD_TRANSITIVE"
	ModeFull               Mode = "FULL"
	ModeFullTransitive     Mode = "FULL_TRANSITIVE"
)

// DefaultMode is the mode of a topic nothing else sets a mode for, as in Confluent.
const DefaultMode = ModeBackward

var modes = []Mode{ModeNone, ModeBackward, ModeBackwardTransitive, ModeForward, ModeForwardTransitive, ModeFull, ModeFullTransitive}

// ParseMode parses a mode name: the Confluent names (BACKWARD_TRANSITIVE, …) in any case,
// so the seeds' lowercase "none", "backward" and "forward" work too. The error wraps
// ErrUnknownMode.
func ParseMode(s string) (Mode, error) {
	u := Mode(strings.ToUpper(strings.TrimSpace(s)))
	for _, m := range modes {
		if u == m {
			return m, nil
		}
	}
	return "", fmt.Errorf("%w: %q (want one of NONE, BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE)", ErrUnknownMode, s)
}

// UnmarshalText parses a mode with ParseMode, so sidecar files and KV records may use any
// accepted spelling.
func (m *Mode) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*m = ""
		return nil
	}
	p, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = p
	return nil
}

func (m Mode) valid() error {
	if m == "" {
		return nil
	}
	_, err := ParseMode(string(m))
	return err
}

func (m Mode) backward() bool {
	return m == ModeBackward || m == ModeBackwardTransitive || m == ModeFull || m == ModeFullTransitive
}

func (m Mode) forward() bool {
	return m == ModeForward || m == ModeForwardTransitive || m == ModeFull || m == ModeFullTransitive
}

func (m Mode) transitive() bool {
	return m == ModeBackwardTransitive || m == ModeForwardTransitive || m == ModeFullTransitive
}

// Policy chooses how strictly Compatible treats property additions and removals.
type Policy string

// Policies. PolicyStrict applies Confluent's default rules: adding a property to an open
// content model is not backward compatible (old data may hold that name with any value), and
// removing one from a closed content model is not backward compatible (old data may hold
// it). PolicyLenient allows both, provided an added property is optional: it assumes
// producers never wrote names the schema did not declare, which is what makes FULL
// compatibility reachable with open content models.
const (
	PolicyStrict  Policy = "STRICT"
	PolicyLenient Policy = "LENIENT"
)

// ParsePolicy parses "STRICT" or "LENIENT" in any case. The error wraps ErrUnknownMode.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(strings.ToUpper(strings.TrimSpace(s))); p {
	case PolicyStrict, PolicyLenient:
		return p, nil
	}
	return "", fmt.Errorf("%w: policy %q (want STRICT or LENIENT)", ErrUnknownMode, s)
}

// UnmarshalText parses a policy with ParsePolicy.
func (p *Policy) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*p = ""
		return nil
	}
	q, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}
