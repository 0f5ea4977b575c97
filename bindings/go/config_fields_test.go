package vpmm

// Config against the library's option list: vpmm_config's fields come from
// one list in the library (src/config/option_list.hpp), and the library
// reports them (vpmm_struct_field). Each must have a Config field, named by
// the Go spelling of its C name, which toC writes at the library's offset and
// configFromC reads back. A field added to the library without its Config
// field fails here.

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unsafe"
)

// cName is the C spelling of a Config field: PageSize -> page_size,
// VASize -> va_size, HIPChunkSize -> hip_chunk_size.
func cName(goName string) string {
	var b strings.Builder
	r := []rune(goName)
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) &&
			(unicode.IsLower(r[i-1]) || (i+1 < len(r) && unicode.IsLower(r[i+1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

func TestConfigHasEveryFieldOfTheLibrary(t *testing.T) {
	fields, err := libraryFields("vpmm_config")
	if err != nil {
		t.Fatal(err)
	}
	// The header fields are the binding's business, not options.
	want := map[string]structField{}
	for _, f := range fields {
		if f.name != "struct_size" && f.name != "config_error" {
			want[f.name] = f
		}
	}
	ct := reflect.TypeOf(Config{})
	cfg := Config{}
	v := reflect.ValueOf(&cfg).Elem()
	seen := map[string]bool{}
	// A distinct value per field, so a field written at another's place shows.
	for i := 0; i < ct.NumField(); i++ {
		sf := ct.Field(i)
		if !sf.IsExported() {
			continue
		}
		name := cName(sf.Name)
		if _, ok := want[name]; !ok {
			t.Errorf("Config.%s (%s) is no field of the library's vpmm_config", sf.Name, name)
			continue
		}
		seen[name] = true
		switch fv := v.Field(i); fv.Kind() {
		case reflect.Uint64:
			fv.SetUint(0x1000 + uint64(i))
		case reflect.Int32:
			fv.SetInt(int64(7 + i))
		case reflect.Float64:
			fv.SetFloat(0.125 + float64(i)/1024)
		case reflect.String:
			fv.SetString("config-fields-" + string(rune('a'+i%26)))
		default:
			t.Errorf("Config.%s has kind %s, which no vpmm_config field has", sf.Name, fv.Kind())
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("vpmm_config.%s has no Config field (add it, with toC and configFromC)", name)
		}
	}

	raw := rawConfig(&cfg)
	for i := 0; i < ct.NumField(); i++ {
		sf := ct.Field(i)
		f, ok := want[cName(sf.Name)]
		if !sf.IsExported() || !ok {
			continue
		}
		var exp bytes.Buffer
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.Uint64:
			binary.Write(&exp, binary.LittleEndian, fv.Uint())
		case reflect.Int32:
			binary.Write(&exp, binary.LittleEndian, int32(fv.Int()))
		case reflect.Float64:
			binary.Write(&exp, binary.LittleEndian, math.Float64bits(fv.Float()))
		case reflect.String:
			// A pointer (to the library's copy): its place and size; the
			// round trip below checks what it points to.
			if int(f.size) != int(unsafe.Sizeof(uintptr(0))) || bytes.Equal(raw[f.offset:f.offset+f.size],
				make([]byte, f.size)) {
				t.Errorf("toC writes Config.%s at the wrong place or size (library: offset %d, %d bytes)",
					sf.Name, f.offset, f.size)
			}
			continue
		}
		if int(f.size) != exp.Len() || !bytes.Equal(raw[f.offset:f.offset+f.size], exp.Bytes()) {
			t.Errorf("toC writes Config.%s at the wrong place or size (library: offset %d, %d bytes)",
				sf.Name, f.offset, f.size)
		}
	}
	if back := configFromRaw(raw); !reflect.DeepEqual(back, cfg) {
		t.Errorf("configFromC(toC(c)) != c:\n got %+v\nwant %+v", back, cfg)
	}
}

// Backend's constants against the library's one table of the kinds' names
// (vpmm_backend_kind_name, listed by asking for 0, 1, ... until NULL): a kind
// the library gains without its constant here, or a constant the library does
// not name, fails.
func TestBackendConstantsAreTheLibraryKinds(t *testing.T) {
	consts := []Backend{BackendAuto, BackendCUDA, BackendHIP, BackendHost}
	kinds := 0
	for Backend(kinds).String() != "" {
		kinds++
	}
	if kinds != len(consts) {
		t.Fatalf("the library names %d backend kinds, the binding has %d constants", kinds, len(consts))
	}
	seen := map[string]bool{}
	for _, b := range consts {
		name := b.String()
		if name == "" || seen[name] {
			t.Fatalf("constant %d: name %q (empty or repeated)", int32(b), name)
		}
		seen[name] = true
	}
	if BackendHost.String() != "host" {
		t.Fatalf("BackendHost is %q", BackendHost.String())
	}
	c := DefaultConfig()
	c.Backend = BackendHost
	c.PageSize = 64 << 10
	c.VASize = 64 * c.PageSize
	p, err := NewPool(&c)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	defer p.Close()
	if p.BackendName() != BackendHost.String() {
		t.Fatalf("a host pool's BackendName %q, BackendHost.String %q", p.BackendName(), BackendHost.String())
	}
}
