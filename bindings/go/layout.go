package vpmm

// The library's own layout facts (vpmm_struct_field), which the binding's
// tests hold Config against: every field of vpmm_config, each an option of
// the library's single option list, must have its Config field, written
// and read at the offset the library gives it.

// #include "vpmm_go.h"
import "C"

import "unsafe"

// structField is one field of a public C struct as the loaded library lays
// it out.
type structField struct {
	name         string
	offset, size uint32
}

// libraryFields lists the fields of the public struct `name` in order.
func libraryFields(name string) ([]structField, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var out []structField
	for i := 0; ; i++ {
		var m msg
		var fname *C.char
		var off, size C.uint32_t
		st := C.go_vpmm_struct_field(cname, C.uint32_t(i), &fname, &off, &size, &m)
		if st == C.VPMM_ERR_INVALID_ARGUMENT && i > 0 {
			return out, nil // past the last field
		}
		if err := result(st, &m); err != nil {
			return nil, err
		}
		out = append(out, structField{C.GoString(fname), uint32(off), uint32(size)})
	}
}

// rawConfig is the C vpmm_config that cfg.toC makes, as bytes.
func rawConfig(cfg *Config) []byte {
	c, _ := cfg.toC()
	return C.GoBytes(unsafe.Pointer(&c), C.int(C.sizeof_vpmm_config))
}

// configFromRaw is configFromC over the bytes of a C vpmm_config.
func configFromRaw(b []byte) Config {
	var c C.vpmm_config
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&c)), C.sizeof_vpmm_config), b)
	return configFromC(&c)
}
