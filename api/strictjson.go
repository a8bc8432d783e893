package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"edgepipe/pipeline"
)

// maxJSONDepth bounds how deeply a request body may nest. The deepest
// request object is three levels (body → scenes → scene).
const maxJSONDepth = 32

// maxFieldErrors caps how many problems one answer lists.
const maxFieldErrors = 50

// decodeStrictJSON decodes body, one JSON object, into v (a pointer to a
// struct) the way a careful reader would: every problem is reported with the
// JSON path of the value it is about ("scenes[2].voice"), all at once.
// Refused, beyond malformed JSON: unknown fields at any level (matched
// exactly; encoding/json would accept "Title" for "title"), a key repeated in
// one object (encoding/json silently keeps the last), numbers that do not
// fit the field (said as such, not as a wrong type), values of the wrong
// JSON type, and anything after the object. JSON null is accepted wherever
// encoding/json accepts it (it leaves the field unset).
func decodeStrictJSON(body []byte, v any) error {
	if strictAccepts(body, reflect.TypeOf(v).Elem()) {
		if json.Unmarshal(body, v) == nil {
			return nil
		}
		// Unreachable when strictAccepts is right; the walk says why.
		reflect.ValueOf(v).Elem().SetZero()
	}
	return walkStrictJSON(body, v)
}

// walkStrictJSON is decodeStrictJSON without the fast path: it walks the
// token stream against v's type and names every problem.
func walkStrictJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := &jsonWalker{dec: dec}
	if err := w.value(reflect.TypeOf(v).Elem(), "", 0); err != nil {
		return fieldError("body", syntaxProblem(err))
	}
	if len(w.errs) > 0 {
		return &pipeline.ValidationError{Fields: w.errs}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fieldError("body", "unexpected data after the JSON object")
	}
	// The walk proved the body matches v's shape, so this cannot fail;
	// if it ever does, say so rather than half-fill v.
	if err := json.Unmarshal(body, v); err != nil {
		return fieldError("body", pipeline.JSONProblem(err))
	}
	return nil
}

// errTooDeep stops a walk into absurdly nested input.
var errTooDeep = errors.New("nested too deeply")

// jsonWalker reads a token stream against a Go type, collecting field
// errors. A returned error means the stream itself is broken (syntax, end of
// input, depth); field errors leave the walk going.
type jsonWalker struct {
	dec  *json.Decoder
	errs []pipeline.FieldError
}

func (w *jsonWalker) fail(path, format string, args ...any) {
	if path == "" {
		path = "body"
	}
	if len(w.errs) < maxFieldErrors {
		w.errs = append(w.errs, pipeline.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
	}
}

// value reads one JSON value at path; t is the Go type it decodes into, nil
// when it is skipped (it still must be well-formed, without repeated keys).
func (w *jsonWalker) value(t reflect.Type, path string, depth int) error {
	if depth > maxJSONDepth {
		return errTooDeep
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '{':
			return w.object(t, path, depth)
		case '[':
			return w.array(t, path, depth)
		}
		return fmt.Errorf("unexpected %q", tok) // the decoder reports this first
	case nil:
		return nil // null leaves the field as it is, as encoding/json does
	case string:
		if t != nil && t.Kind() != reflect.String && t.Kind() != reflect.Interface {
			w.fail(path, "must be %s, not a string", expected(t))
		}
	case bool:
		if t != nil && t.Kind() != reflect.Bool && t.Kind() != reflect.Interface {
			w.fail(path, "must be %s, not true or false", expected(t))
		}
	case json.Number:
		if t != nil {
			w.number(t, path, tok)
		}
	}
	return nil
}

func (w *jsonWalker) number(t reflect.Type, path string, n json.Number) {
	s := n.String()
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if strings.ContainsAny(s, ".eE") {
			w.fail(path, "must be a whole number written without a fraction or exponent, not %s", clip(s))
			return
		}
		bits := t.Bits()
		if _, err := strconv.ParseInt(s, 10, bits); err != nil {
			lo, hi := int64(math.MinInt64)>>(64-bits), int64(math.MaxInt64)>>(64-bits)
			w.fail(path, "is out of range: %s is not from %d to %d", clip(s), lo, hi)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if strings.ContainsAny(s, ".eE") {
			w.fail(path, "must be a whole number written without a fraction or exponent, not %s", clip(s))
			return
		}
		if _, err := strconv.ParseUint(s, 10, t.Bits()); err != nil {
			w.fail(path, "is out of range: %s is not from 0 to %d", clip(s), uint64(math.MaxUint64)>>(64-t.Bits()))
		}
	case reflect.Float32, reflect.Float64:
		if _, err := strconv.ParseFloat(s, t.Bits()); err != nil {
			w.fail(path, "is out of range: %s", clip(s))
		}
	case reflect.Interface:
	default:
		w.fail(path, "must be %s, not a number", expected(t))
	}
}

func (w *jsonWalker) object(t reflect.Type, path string, depth int) error {
	var fields map[string]reflect.Type
	var elem reflect.Type
	switch {
	case t == nil || t.Kind() == reflect.Interface:
	case t.Kind() == reflect.Struct:
		fields = jsonFields(t)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		elem = t.Elem()
	default:
		w.fail(path, "must be %s, not an object", expected(t))
		t = nil
	}
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		sub := join(path, key)
		var ft reflect.Type
		switch {
		case seen[key]:
			w.fail(sub, "appears more than once in the object; send each field once")
		case fields != nil:
			var ok bool
			if ft, ok = fields[key]; !ok {
				w.fail(sub, "is not a known field (known: %s)", knownFields(fields))
			}
		case elem != nil:
			ft = elem
		}
		seen[key] = true
		if err := w.value(ft, sub, depth+1); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // '}'
	return err
}

func (w *jsonWalker) array(t reflect.Type, path string, depth int) error {
	var elem reflect.Type
	switch {
	case t == nil || t.Kind() == reflect.Interface:
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		elem = t.Elem()
	default:
		w.fail(path, "must be %s, not an array", expected(t))
	}
	for i := 0; w.dec.More(); i++ {
		if err := w.value(elem, path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // ']'
	return err
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldsOf caches jsonFields per struct type: every submission walks the
// same few types, and building the map each time cost an eighth of a
// decode (BenchmarkDecodeSubmission's profile).
var fieldsOf sync.Map // reflect.Type → map[string]reflect.Type, read-only once stored

// jsonFields maps a struct's JSON names to their types, as encoding/json
// names them (tag name, else the Go name; "-" and unexported fields left
// out). The request types embed no structs. The map is shared: read it only.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsOf.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m, _ := fieldsOf.LoadOrStore(t, structFields(t))
	return m.(map[string]reflect.Type)
}

func structFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func knownFields(fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	// Sorted, so the message is the same every time.
	for i := 1; i < len(names); i++ {
		for j := i; j > 0 && names[j] < names[j-1]; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
	return strings.Join(names, ", ")
}

// expected names the JSON a Go type takes.
func expected(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}

// syntaxProblem describes an error that stopped the walk.
func syntaxProblem(err error) string {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.Is(err, errTooDeep):
		return fmt.Sprintf("the JSON nests more than %d levels deep", maxJSONDepth)
	case errors.Is(err, io.EOF):
		return "empty body"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	return "malformed JSON"
}
