package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unique"
)

// record is the stored form of a Resource (ARCHITECTURE.md, "The state
// machine and its format"): about a third of a Resource's heap. The id, name,
// endpoint, machine and attrs share one allocation, text; a name, endpoint or
// machine found in what precedes it (a machine's id is "machine:<machine>",
// its name is often the machine) is not stored twice. Kind and owner, of
// which a state has few, are interned handles. Attrs are held as their
// snapshot encoding (a JSON object, keys sorted, values compact, no HTML
// escaping), so Persist writes them as they are and a record that keeps its
// attrs shares them with the one it replaces. A record is immutable once
// stored: a change stores a new one.
type record struct {
	text                    string // id, then whatever of name, endpoint, machine it does not hold, then attrs
	idEnd                   uint32 // text[:idEnd] is the id
	nameAt, nameEnd         uint32
	endpointAt, endpointEnd uint32
	machineAt, machineEnd   uint32
	attrsAt                 uint32 // text[attrsAt:] is the attrs
	kind, owner             unique.Handle[string]
	observedAt, ttlMs       int64
	registeredAt, renewedAt int64
	expiresAt               int64
	revision                uint64
}

func (r *record) id() string       { return r.text[:r.idEnd] }
func (r *record) name() string     { return r.text[r.nameAt:r.nameEnd] }
func (r *record) endpoint() string { return r.text[r.endpointAt:r.endpointEnd] }
func (r *record) machine() string  { return r.text[r.machineAt:r.machineEnd] }
func (r *record) attrs() string    { return r.text[r.attrsAt:] }

// emptyAttrs is the encoding of a record without attrs.
const emptyAttrs = "{}"

// encodeAttrs returns the snapshot encoding of attrs ({} for none): what
// Persist wrote for a Resource's attrs map.
func encodeAttrs(attrs map[string]json.RawMessage) (string, error) {
	if len(attrs) == 0 {
		return emptyAttrs, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(attrs); err != nil {
		return "", fmt.Errorf("encode attrs: %w", err)
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// decodeAttrs is encodeAttrs reversed: a fresh map the caller owns.
func decodeAttrs(s string) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	if s != emptyAttrs {
		// s is encodeAttrs' output, which always decodes.
		_ = json.Unmarshal([]byte(s), &m)
	}
	return m
}

// newRecord stores r's fields with attrs already encoded (encodeAttrs).
func newRecord(r *Resource, attrs string) *record {
	var b strings.Builder
	b.Grow(len(r.ID) + len(r.Name) + len(r.Endpoint) + len(r.Machine) + len(attrs))
	b.WriteString(r.ID)
	place := func(s string) (at, end uint32) {
		if i := strings.Index(b.String(), s); i >= 0 {
			return u32(i), u32(i + len(s))
		}
		at = u32(b.Len())
		b.WriteString(s)
		return at, u32(b.Len())
	}
	rec := &record{idEnd: u32(len(r.ID)),
		kind: unique.Make(r.Kind), owner: unique.Make(r.Owner),
		observedAt: r.ObservedAt, ttlMs: r.TTLMs, registeredAt: r.RegisteredAt, renewedAt: r.RenewedAt,
		expiresAt: r.ExpiresAt, revision: r.Revision,
	}
	rec.machineAt, rec.machineEnd = place(r.Machine)
	rec.nameAt, rec.nameEnd = place(r.Name)
	rec.endpointAt, rec.endpointEnd = place(r.Endpoint)
	rec.attrsAt = u32(b.Len())
	b.WriteString(attrs)
	rec.text = b.String()
	return rec
}

// withAttrs returns a copy of r holding attrs instead of its own.
func (r *record) withAttrs(attrs string) *record {
	c := *r
	c.text = r.text[:r.attrsAt] + attrs
	return &c
}

// resource returns the record as a Resource with a map of its own.
func (r *record) resource() Resource {
	return Resource{
		ID: r.id(), Kind: r.kind.Value(), Name: r.name(), Machine: r.machine(), Owner: r.owner.Value(),
		Endpoint: r.endpoint(), Attrs: decodeAttrs(r.attrs()), ObservedAt: r.observedAt, TTLMs: r.ttlMs,
		RegisteredAt: r.registeredAt, RenewedAt: r.renewedAt, ExpiresAt: r.expiresAt, Revision: r.revision,
	}
}

// appendJSON appends the record's snapshot encoding: the bytes json.Marshal
// (without HTML escaping) writes for its Resource.
func (r *record) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, r.id())
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, r.kind.Value())
	b = append(b, `,"name":`...)
	b = appendJSONString(b, r.name())
	b = append(b, `,"machine":`...)
	b = appendJSONString(b, r.machine())
	b = append(b, `,"owner":`...)
	b = appendJSONString(b, r.owner.Value())
	if ep := r.endpoint(); ep != "" {
		b = append(b, `,"endpoint":`...)
		b = appendJSONString(b, ep)
	}
	b = append(b, `,"attrs":`...)
	b = append(b, r.attrs()...)
	for _, f := range [...]struct {
		key string
		v   int64
	}{
		{`,"observedAt":`, r.observedAt},
		{`,"ttlMs":`, r.ttlMs},
		{`,"registeredAt":`, r.registeredAt},
		{`,"renewedAt":`, r.renewedAt},
		{`,"expiresAt":`, r.expiresAt},
	} {
		b = append(b, f.key...)
		b = strconv.AppendInt(b, f.v, 10)
	}
	b = append(b, `,"revision":`...)
	b = strconv.AppendUint(b, r.revision, 10)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes a string without HTML
// escaping. Printable ASCII other than '"' and '\' is written as it is;
// anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Orders of the record trees: by id (the resources), by (expiresAt, id)
// (the expiry index) and by (machine, id) (the by-machine index).
func lessRecord(a, b *record) bool { return a.id() < b.id() }

func lessRecordExpiry(a, b *record) bool {
	if a.expiresAt != b.expiresAt {
		return a.expiresAt < b.expiresAt
	}
	return a.id() < b.id()
}

func lessRecordMachine(a, b *record) bool {
	if am, bm := a.machine(), b.machine(); am != bm {
		return am < bm
	}
	return a.id() < b.id()
}

// probe returns a record for tree lookups by id.
func probe(id string) *record { return &record{text: id, idEnd: u32(len(id))} }

// machineProbe returns a record that sorts before every record of machine in
// the by-machine order.
func machineProbe(machine string) *record {
	return &record{text: machine, machineEnd: u32(len(machine))}
}

// u32 is an offset into a record's text, which is never near 4 GiB: a
// command's strings and attrs are bounded (wire's limits, MaxAttrsBytes) and a
// restored record is decoded whole, in memory, before it is stored.
func u32(n int) uint32 {
	return uint32(n) //nolint:gosec // G115: see above
}
