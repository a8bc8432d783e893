package api

import (
	"reflect"
	"strconv"
)

// strictAccepts says whether decodeStrictJSON's walk would find nothing
// wrong with body as a t, reading the bytes directly instead of through
// encoding/json's token stream (which allocates for every token: the walk
// cost twice a bare request in BenchmarkDecodeSubmission). It answers true
// only when sure; whatever it does not handle — an escaped key, a kind of
// field the request types do not have, more than maxFastKeys keys in one
// object — is false, and the walk decides and says what is wrong. So it
// never changes an answer, only how soon a good body gets it
// (FuzzStrictAcceptsAgreesWithWalk holds it to that).
func strictAccepts(body []byte, t reflect.Type) bool {
	s := fastScan{b: body}
	s.ws()
	if !s.value(t, 0) {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

// maxFastKeys is the most keys one object may have on the fast path (the
// duplicate check compares each with those before it).
const maxFastKeys = 16

type fastScan struct {
	b []byte
	i int
}

func (s *fastScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// literal consumes lit if it is next.
func (s *fastScan) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// value reads one value for t, as jsonWalker.value would accept it.
func (s *fastScan) value(t reflect.Type, depth int) bool {
	if depth > maxJSONDepth || t == nil {
		return false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s.i >= len(s.b) {
		return false
	}
	if s.b[s.i] == 'n' {
		return s.literal("null") // null suits every field, as in the walk
	}
	switch t.Kind() {
	case reflect.String:
		_, _, ok := s.str()
		return ok
	case reflect.Bool:
		return s.literal("true") || s.literal("false")
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		start, ok := s.number()
		if !ok {
			return false
		}
		// ParseInt also refuses a fraction or an exponent, as the walk does.
		_, err := strconv.ParseInt(string(s.b[start:s.i]), 10, t.Bits())
		return err == nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		start, ok := s.number()
		if !ok {
			return false
		}
		_, err := strconv.ParseUint(string(s.b[start:s.i]), 10, t.Bits())
		return err == nil
	case reflect.Float32, reflect.Float64:
		start, ok := s.number()
		if !ok {
			return false
		}
		_, err := strconv.ParseFloat(string(s.b[start:s.i]), t.Bits())
		return err == nil
	case reflect.Struct:
		return s.object(t, nil, depth)
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return false
		}
		return s.object(nil, t.Elem(), depth)
	case reflect.Slice, reflect.Array:
		return s.array(t.Elem(), depth)
	}
	return false
}

// object reads an object: a struct's known fields (st), or a map's
// values (elem). Keys must be unescaped and each appear once.
func (s *fastScan) object(st, elem reflect.Type, depth int) bool {
	if s.b[s.i] != '{' {
		return false
	}
	s.i++
	var fields map[string]reflect.Type
	if st != nil {
		fields = jsonFields(st)
	}
	var keys [maxFastKeys][2]int
	n := 0
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		ks, ke, ok := s.str()
		if !ok || ke < 0 || n == maxFastKeys {
			return false
		}
		key := s.b[ks:ke]
		for _, c := range key {
			if c >= 0x80 {
				// encoding/json decodes invalid UTF-8 to U+FFFD, so
				// different bytes can make the same key: the walk decides.
				return false
			}
		}
		for _, k := range keys[:n] {
			if string(s.b[k[0]:k[1]]) == string(key) {
				return false
			}
		}
		keys[n] = [2]int{ks, ke}
		n++
		ft := elem
		if fields != nil {
			if ft, ok = fields[string(key)]; !ok {
				return false
			}
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if !s.value(ft, depth+1) {
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

func (s *fastScan) array(elem reflect.Type, depth int) bool {
	if s.b[s.i] != '[' {
		return false
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(elem, depth+1) {
			return false
		}
		if more, ok := s.next(']'); !more {
			return ok
		}
	}
}

// next reads what follows a member or an element: a comma (more follows)
// or the closing bracket (ok, the container is done); anything else is
// neither.
func (s *fastScan) next(closing byte) (more, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		s.ws()
		return true, true
	case closing:
		s.i++
		return false, true
	}
	return false, false
}

// str reads a string. start and end bound its content when it holds no
// escape; end is -1 when it does (a key must then take the walk).
// Its bytes are not checked for UTF-8: encoding/json takes any.
func (s *fastScan) str() (start, end int, ok bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return 0, 0, false
	}
	s.i++
	start, end = s.i, -2
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			if end == -2 {
				end = s.i
			}
			s.i++
			return start, end, true
		case c < 0x20:
			return 0, 0, false
		case c == '\\':
			end = -1
			if s.i+1 >= len(s.b) {
				return 0, 0, false
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return 0, 0, false
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !isHex(h) {
						return 0, 0, false
					}
				}
				s.i += 6
			default:
				return 0, 0, false
			}
		default:
			s.i++
		}
	}
	return 0, 0, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number reads a number in JSON's grammar.
func (s *fastScan) number() (start int, ok bool) {
	start = s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return start, false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return start, false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return start, false
		}
	}
	return start, true
}

// digits reads one or more digits.
func (s *fastScan) digits() bool {
	from := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > from
}
