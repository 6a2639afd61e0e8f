// Package mongoname holds MongoDB's restrictions on the names of databases, collections and
// field paths, as MongoDB documents them ("Naming Restrictions" in the MongoDB manual's
// Limits and Thresholds), stated once for every package that checks a name before MongoDB
// sees it: changefeed, projection, snapshotapi and internal/config.
//
// Each function returns nil or an error saying what is wrong; the caller adds which setting
// it checked. Where a setting may be empty (a feed of a whole deployment names no database),
// the caller decides so before asking: the names themselves are never empty.
package mongoname

import (
	"fmt"
	"strings"
)

const (
	// MaxDatabaseBytes is the longest database name MongoDB accepts: fewer than 64 bytes.
	MaxDatabaseBytes = 63
	// MaxCollectionBytes is the longest collection name jetbus accepts. MongoDB's own limit is
	// on the namespace (database, dot and collection: 255 bytes); jetbus keeps room for the
	// suffixes projections add to a collection's name (generations, _history).
	MaxCollectionBytes = 200
	// DatabaseForbidden are the characters a database name may not hold (besides NUL):
	// MongoDB's list for Windows, a superset of its list for Unix ("/\. "$"), so that a name
	// valid here is valid on either.
	DatabaseForbidden = `/\. "$*<>:|?`
)

// Database checks a database name: not empty, at most MaxDatabaseBytes bytes, none of
// DatabaseForbidden nor NUL.
func Database(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("a MongoDB database name is not empty")
	case len(s) > MaxDatabaseBytes:
		return fmt.Errorf("%q is not a MongoDB database name: longer than %d bytes", s, MaxDatabaseBytes)
	case strings.ContainsAny(s, DatabaseForbidden+"\x00"):
		return fmt.Errorf("%q is not a MongoDB database name: it holds one of %s or NUL", s, DatabaseForbidden)
	}
	return nil
}

// Collection checks a collection name: not empty, at most MaxCollectionBytes bytes, no $
// nor NUL, not starting with "system." (MongoDB's own collections).
func Collection(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("a MongoDB collection name is not empty")
	case len(s) > MaxCollectionBytes:
		return fmt.Errorf("%q is not a MongoDB collection name: longer than %d bytes", s, MaxCollectionBytes)
	case strings.ContainsAny(s, "$\x00"):
		return fmt.Errorf("%q is not a MongoDB collection name: it holds $ or NUL", s)
	case strings.HasPrefix(s, "system."):
		return fmt.Errorf("%q is not a collection jetbus may use: system.* are MongoDB's", s)
	}
	return nil
}

// FieldPath checks a field path as queries, sorts and indexes name it: dot-separated field
// names, none empty (no leading, trailing or doubled dot), none starting with $ (an
// operator there), and no NUL anywhere.
func FieldPath(s string) error {
	if s == "" {
		return fmt.Errorf("a field path is not empty")
	}
	if strings.Contains(s, "\x00") {
		return fmt.Errorf("%q is not a field path: it holds NUL", s)
	}
	for _, name := range strings.Split(s, ".") {
		switch {
		case name == "":
			return fmt.Errorf("%q is not a field path: an empty name (a leading, trailing or doubled dot)", s)
		case strings.HasPrefix(name, "$"):
			return fmt.Errorf("%q is not a field path: %q starts with $", s, name)
		}
	}
	return nil
}
