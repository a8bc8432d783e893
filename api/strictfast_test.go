package api

import (
	"reflect"
	"strings"
	"testing"
)

// strictTypes are the request types the API decodes strictly.
var strictTypes = []reflect.Type{
	reflect.TypeFor[submitRequest](),
	reflect.TypeFor[DeadLetterBulkRequest](),
	reflect.TypeFor[struct {
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}](),
	reflect.TypeFor[struct {
		M  map[string]int `json:"m"`
		F  float32        `json:"f"`
		U  uint8          `json:"u"`
		B  bool           `json:"b"`
		I8 int8           `json:"i8"`
		A  [2]string      `json:"a"`
	}](),
	reflect.TypeFor[nest](),
}

// nest nests as deep as a body does.
type nest struct {
	N *nest `json:"n"`
}

// benchBody is the body bench api posts (api/testdata/wrk-submit.lua).
const benchBody = `{"operation":"render_video","title":"bench","scenes":[{"image_prompt":"a lighthouse at dusk","narration":"every night the keeper climbed the stairs","duration_ms":2000},{"video_prompt":"waves against rocks","narration":"and the sea answered","duration_ms":1500}],"options":{"resolution":"640x360","fps":25}}`

// The fast path takes the bodies clients send — without it the speed-up
// is gone and nothing else would notice — and declines every body the walk
// has something to say about, which then gets the walk's answer.
func TestStrictAccepts(t *testing.T) {
	t.Parallel()
	sub := reflect.TypeFor[submitRequest]()
	bulk := reflect.TypeFor[DeadLetterBulkRequest]()
	odd := strictTypes[3]
	for _, tc := range []struct {
		name string
		t    reflect.Type
		body string
		want bool
	}{
		{"bench body", sub, benchBody, true},
		{"test body with whitespace", sub, validBody, true},
		{"empty object", sub, `{}`, true},
		{"nulls", sub, ` {"scenes":null,"options":null,"instance_id":null} `, true},
		{"escaped value", sub, `{"title":"a\"b\\c\u00e9\n","instance_id":"v1-x"}`, true},
		{"invalid UTF-8 value", sub, "{\"title\":\"\xff\"}", true},
		{"negative zero", sub, `{"scenes":[{"duration_ms":-0}]}`, true},
		{"bulk", bulk, `{"filter":{"reason":"poison","older_than":"7d"},"limit":100,"dry_run":true}`, true},
		{"map, float, uint, bool, array", odd, `{"m":{"a":1,"b":-2},"f":1.5e3,"u":255,"b":false,"i8":-128,"a":["x","y"]}`, true},

		{"duplicate key", sub, `{"title":"a","title":"b"}`, false},
		{"duplicate map key", odd, `{"m":{"a":1,"a":2}}`, false},
		{"unknown key", sub, `{"titel":"a"}`, false},
		{"key of another case", sub, `{"Title":"a"}`, false},
		{"escaped key", sub, `{"titl\u0065":"a"}`, false},
		{"map key repeated, once escaped", odd, `{"m":{"a":1,"\u0061":2}}`, false},
		{"non-ASCII key", odd, "{\"m\":{\"\xff\":1,\"\xfe\":2}}", false},
		{"fraction in a whole number", sub, `{"options":{"fps":25.0}}`, false},
		{"exponent in a whole number", sub, `{"options":{"fps":2e1}}`, false},
		{"out of range int", odd, `{"i8":128}`, false},
		{"out of range uint", odd, `{"u":256}`, false},
		{"negative uint", odd, `{"u":-1}`, false},
		{"out of range float", odd, `{"f":1e39}`, false},
		{"string for a number", sub, `{"options":{"fps":"25"}}`, false},
		{"number for a string", sub, `{"title":1}`, false},
		{"object for an array", sub, `{"scenes":{}}`, false},
		{"array for an object", sub, `{"options":[]}`, false},
		{"trailing data", sub, `{} x`, false},
		{"two values", sub, `{}{}`, false},
		{"truncated", sub, `{"title":"a"`, false},
		{"trailing comma", sub, `{"title":"a",}`, false},
		{"leading zero", sub, `{"options":{"fps":025}}`, false},
		{"bad escape", sub, `{"title":"\x"}`, false},
		{"control character", sub, "{\"title\":\"a\nb\"}", false},
		{"bare word", sub, `{"title":nul}`, false},
		{"too many keys", odd, `{"m":{` + manyKeys(maxFastKeys+1) + `}}`, false},
		{"deep", reflect.TypeFor[nest](), strings.Repeat(`{"n":`, maxJSONDepth) + `null` + strings.Repeat(`}`, maxJSONDepth), true},
		{"too deep", reflect.TypeFor[nest](), strings.Repeat(`{"n":`, maxJSONDepth+1) + `null` + strings.Repeat(`}`, maxJSONDepth+1), false},
		{"empty", sub, ``, false},
	} {
		if got := strictAccepts([]byte(tc.body), tc.t); got != tc.want {
			t.Errorf("%s: strictAccepts(%s) = %v, want %v", tc.name, tc.body, got, tc.want)
		}
		if tc.want {
			v := reflect.New(tc.t).Interface()
			if err := walkStrictJSON([]byte(tc.body), v); err != nil {
				t.Errorf("%s: the walk refuses what the fast path takes: %v", tc.name, err)
			}
		}
	}
}

func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + string(rune('a'+i)) + `":1`)
	}
	return b.String()
}

// FuzzStrictAcceptsAgreesWithWalk: whatever the fast path takes, the walk
// takes too, and both decode it to the same value — so the fast path can
// only ever make a good body's answer come sooner.
//
//	go test ./api -run '^$' -fuzz FuzzStrictAcceptsAgreesWithWalk -fuzztime 60s
func FuzzStrictAcceptsAgreesWithWalk(f *testing.F) {
	for _, s := range []string{
		benchBody, validBody, `{}`, `null`, `{"title":"a","title":"b"}`, `{"options":{"fps":1e3}}`,
		`{"m":{"a":1},"f":1.5,"u":3,"b":true,"i8":-1,"a":["x","y"]}`, `{"filter":{"reason":"x"},"limit":5}`,
		`{"title":"\u00e9\ud800"}`, `{"scenes":[{"duration_ms":-0}]}`, `{"a":["x","y","z"]}`,
	} {
		for k := range strictTypes {
			f.Add([]byte(s), uint8(k))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, k uint8) {
		typ := strictTypes[int(k)%len(strictTypes)]
		if !strictAccepts(body, typ) {
			return
		}
		walked := reflect.New(typ)
		if err := walkStrictJSON(body, walked.Interface()); err != nil {
			t.Fatalf("%q as %v: the fast path takes it, the walk says %v", body, typ, err)
		}
		fast := reflect.New(typ)
		if err := decodeStrictJSON(body, fast.Interface()); err != nil {
			t.Fatalf("%q as %v: %v", body, typ, err)
		}
		if !reflect.DeepEqual(fast.Interface(), walked.Interface()) {
			t.Fatalf("%q as %v: fast path %+v, walk %+v", body, typ, fast.Elem(), walked.Elem())
		}
	})
}
