package jsonenc

// WithinDepth reports whether the arrays and objects of the JSON text b nest at most max
// levels deep. It reads b once, without recursion and without allocating, and stops at the
// first level past max: it runs before any recursive parser sees b, so that a body of a
// million '[' costs a scan of it, not a stack of a million frames. It does not validate b.
func WithinDepth(b []byte, max int) bool {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			if depth > max {
				return false
			}
		case ']', '}':
			depth--
		}
	}
	return true
}
