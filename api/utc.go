package api

import (
	"reflect"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
)

// Every date-time the api sends is UTC, written with Z. A time.Time keeps
// the location it was made in (a schedule's due time in BUILDRISK_TIMEZONE,
// a pgx timestamptz in the process's local zone) and encoding/json writes
// its offset: valid RFC 3339, but zod's default datetime(), and so the
// clients hey-api and orval generate, refuse it. Converting in each view
// would leave the next field to remember it; utcTimes does it once, for
// every answer Huma writes. The console renders local time itself.

// utcTimes is a Huma transformer: it returns v with every time.Time it
// holds in UTC. v is never written to (a handler's answer may share
// values with a cache): what changes is copied.
func utcTimes(_ huma.Context, _ string, v any) (any, error) {
	if v == nil {
		return v, nil
	}
	out, changed := inUTC(reflect.ValueOf(v))
	if !changed {
		return v, nil
	}
	return out.Interface(), nil
}

var timeType = reflect.TypeFor[time.Time]()

// inUTC returns v with its time.Time values in UTC and whether any
// changed; only a changed part is copied.
func inUTC(v reflect.Value) (reflect.Value, bool) {
	if !v.IsValid() || !mayHoldTime(v.Type()) {
		return v, false
	}
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == timeType {
			return timeInUTC(v)
		}
		return structInUTC(v)
	case reflect.Pointer:
		if v.IsNil() {
			return v, false
		}
		elem, changed := inUTC(v.Elem())
		if !changed {
			return v, false
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(elem)
		return p, true
	case reflect.Interface:
		if v.IsNil() {
			return v, false
		}
		elem, changed := inUTC(v.Elem())
		if !changed {
			return v, false
		}
		out := reflect.New(v.Type()).Elem()
		out.Set(elem)
		return out, true
	case reflect.Slice, reflect.Array:
		return listInUTC(v)
	case reflect.Map:
		return mapInUTC(v)
	}
	return v, false
}

// timeInUTC converts one time.Time whose offset is not zero (one at zero
// is already written with Z).
func timeInUTC(v reflect.Value) (reflect.Value, bool) {
	t := v.Interface().(time.Time)
	if _, offset := t.Zone(); offset == 0 {
		return v, false
	}
	return reflect.ValueOf(t.UTC()), true
}

// structInUTC copies a struct whose exported fields hold a time to
// convert.
func structInUTC(v reflect.Value) (reflect.Value, bool) {
	var out reflect.Value
	for i := range v.NumField() {
		if !v.Type().Field(i).IsExported() {
			continue
		}
		f, changed := inUTC(v.Field(i))
		if !changed {
			continue
		}
		if !out.IsValid() {
			out = reflect.New(v.Type()).Elem()
			out.Set(v)
		}
		out.Field(i).Set(f)
	}
	if !out.IsValid() {
		return v, false
	}
	return out, true
}

// listInUTC copies a slice or an array whose elements hold a time to
// convert.
func listInUTC(v reflect.Value) (reflect.Value, bool) {
	if v.Kind() == reflect.Slice && v.IsNil() {
		return v, false
	}
	var out reflect.Value
	for i := range v.Len() {
		e, changed := inUTC(v.Index(i))
		if !changed {
			continue
		}
		if !out.IsValid() {
			if v.Kind() == reflect.Slice {
				out = reflect.MakeSlice(v.Type(), v.Len(), v.Len())
				reflect.Copy(out, v)
			} else {
				out = reflect.New(v.Type()).Elem()
				out.Set(v)
			}
		}
		out.Index(i).Set(e)
	}
	if !out.IsValid() {
		return v, false
	}
	return out, true
}

// mapInUTC copies a map whose values hold a time to convert.
func mapInUTC(v reflect.Value) (reflect.Value, bool) {
	if v.IsNil() {
		return v, false
	}
	var out reflect.Value
	iter := v.MapRange()
	for iter.Next() {
		e, changed := inUTC(iter.Value())
		if !changed {
			continue
		}
		if !out.IsValid() {
			out = reflect.MakeMapWithSize(v.Type(), v.Len())
			for _, k := range v.MapKeys() {
				out.SetMapIndex(k, v.MapIndex(k))
			}
		}
		out.SetMapIndex(iter.Key(), e)
	}
	if !out.IsValid() {
		return v, false
	}
	return out, true
}

// mayHoldTimeCache remembers mayHoldTime per type: answers are few types,
// walked at every call.
var mayHoldTimeCache sync.Map // reflect.Type -> bool

// mayHoldTime reports whether a value of type t can hold a time.Time, so
// that inUTC skips what cannot (a list of strings) without walking it.
func mayHoldTime(t reflect.Type) bool {
	if known, ok := mayHoldTimeCache.Load(t); ok {
		return known.(bool)
	}
	holds := typeHoldsTime(t, map[reflect.Type]bool{})
	mayHoldTimeCache.Store(t, holds)
	return holds
}

// typeHoldsTime walks t's exported fields, elements and values; seen
// breaks a type's reference to itself.
func typeHoldsTime(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == timeType || t.Kind() == reflect.Interface {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return typeHoldsTime(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && typeHoldsTime(f.Type, seen) {
				return true
			}
		}
	}
	return false
}
