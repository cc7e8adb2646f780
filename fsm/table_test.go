package fsm

import (
	"bytes"
	"errors"
	"go/ast"
	goconstant "go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	pathpkg "path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// declaredTypes type-checks the package's own source (its non-test files)
// and returns every constant of type CommandType, whatever its initializer
// (a literal, an expression of other constants, iota), so a type number
// added without a table entry is caught even before anyone writes a sample
// for it.
//
// Only the package's own declarations matter, so every import is an empty
// stand-in (type-checking raft and its dependencies from source takes
// seconds). What the package takes from an import does not resolve; those
// errors are ignored, unless a constant that involves CommandType is left
// without a type: a type number must never go unseen.
func declaredTypes(t *testing.T) map[string]CommandType {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		parsed = append(parsed, f)
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: stubImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check("github.com/elanous/elanous-node/fsm", fset, parsed, info)
	commandType, ok := pkg.Scope().Lookup("CommandType").(*types.TypeName)
	if !ok {
		t.Fatal("the package declares no type CommandType")
	}
	// involves reports whether an expression names CommandType or one of
	// its constants.
	involves := func(e ast.Expr) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				if obj := info.Uses[id]; obj != nil && (obj == commandType || types.Identical(obj.Type(), commandType.Type())) {
					found = true
				}
			}
			return !found
		})
		return found
	}

	out := map[string]CommandType{}
	for _, f := range parsed {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for _, id := range vs.Names {
					c, ok := info.Defs[id].(*types.Const)
					if !ok { // the blank identifier
						continue
					}
					pos := fset.Position(id.Pos())
					if types.Identical(c.Type(), commandType.Type()) {
						n, exact := goconstant.Uint64Val(c.Val())
						if !exact || n > 0xff {
							t.Fatalf("%s: constant %s = %s is not a type number", pos, id.Name, c.Val())
						}
						out[id.Name] = CommandType(n)
						continue
					}
					if c.Type() == types.Typ[types.Invalid] && (vs.Type != nil && involves(vs.Type) || slices.ContainsFunc(vs.Values, involves)) {
						t.Fatalf("%s: constant %s involves CommandType, but its value does not resolve without its imports", pos, id.Name)
					}
				}
			}
		}
	}
	return out
}

// stubImporter gives each import an empty package of that path.
type stubImporter struct{}

func (stubImporter) Import(path string) (*types.Package, error) {
	p := types.NewPackage(path, pathpkg.Base(path))
	p.MarkComplete()
	return p, nil
}

// TestCommandTable proves that every command type is registered once and
// that every registered type decodes, round-trips, is stamped and applies.
// It fails when a type is declared without a table entry, registered without
// a sample below, or registered with a spec that cannot stamp or apply it.
func TestCommandTable(t *testing.T) {
	samples := map[CommandType]Command{}
	for _, cmd := range sampleCommands() {
		if _, dup := samples[cmd.Type()]; dup {
			t.Fatalf("sampleCommands() has two samples of type %d", cmd.Type())
		}
		samples[cmd.Type()] = cmd
	}

	declared := declaredTypes(t)
	for name, typ := range declared {
		switch typ {
		case reservedType, SkipBit:
			if _, ok := commandTable[typ]; ok {
				t.Errorf("%s (%d) is registered in the command table; it must not be", name, typ)
			}
			continue
		}
		if _, ok := commandTable[typ]; !ok {
			t.Errorf("command type %s (%d) is declared but not in the command table", name, typ)
		}
	}
	// The other way round, which also proves the scan sees the constants.
	for typ, sp := range commandTable {
		if !slices.Contains(slices.Collect(maps.Values(declared)), typ) {
			t.Errorf("type %d (%s) is in the command table but no CommandType constant names it", typ, sp.name)
		}
	}

	names := map[string]CommandType{}
	for typ, sp := range commandTable {
		if typ == reservedType || typ&SkipBit != 0 {
			t.Errorf("command table holds type %d: 0 is reserved and %#x is the skip bit", typ, SkipBit)
		}
		if sp.name == "" || TypeName(typ) != sp.name {
			t.Errorf("type %d has name %q, TypeName %q; want a name", typ, sp.name, TypeName(typ))
		}
		if other, dup := names[sp.name]; dup {
			t.Errorf("types %d and %d share the name %q", typ, other, sp.name)
		}
		names[sp.name] = typ
		if sp.decode == nil || sp.stamp == nil || sp.apply == nil {
			t.Errorf("type %d (%s) lacks a decoder, stamp or apply function", typ, sp.name)
			continue
		}
		sample, ok := samples[typ]
		if !ok {
			t.Errorf("type %d (%s) is in the command table but sampleCommands() has no sample of it", typ, sp.name)
			continue
		}
		t.Run(sp.name, func(t *testing.T) {
			if got := sample.Type(); got != typ {
				t.Fatalf("sample.Type() = %d, want %d", got, typ)
			}
			// Stamp sets Now and nothing else.
			const stampedNow = t0 + 12345
			stamped := Stamp(sample, stampedNow)
			if got := stamped.header().Now; got != stampedNow {
				t.Errorf("Stamp(%s).Now = %d, want %d", sp.name, got, stampedNow)
			}
			if reflect.TypeOf(stamped) != reflect.TypeOf(sample) {
				t.Errorf("Stamp(%s) = %T, want %T", sp.name, stamped, sample)
			}
			restamped := Stamp(stamped, sample.header().Now)
			if !reflect.DeepEqual(restamped, sample) {
				t.Errorf("Stamp changed more than Now: %#v, want %#v", restamped, sample)
			}
			// Encode → Decode → Encode is the identity.
			data, err := Encode(stamped)
			if err != nil {
				t.Fatalf("Encode() error = %v", err)
			}
			if CommandType(data[0]) != typ {
				t.Errorf("Encode()[0] = %d, want %d", data[0], typ)
			}
			decoded, ok, err := Decode(data)
			if err != nil || !ok {
				t.Fatalf("Decode() = _, %v, %v, want ok", ok, err)
			}
			if !reflect.DeepEqual(decoded, stamped) {
				t.Errorf("Decode() = %#v, want %#v", decoded, stamped)
			}
			if again, err := Encode(decoded); err != nil || !bytes.Equal(again, data) {
				t.Errorf("Encode(Decode()) = %s, %v, want %s", again, err, data)
			}
			// It applies: on a state holding one of everything, a valid
			// sample is never refused as malformed, and the cluster time
			// moves to its Now (a claim sets it).
			h := newBaseline(t)
			if typ != SetFormatType {
				h.mustApply(SetFormat{Header: Header{Now: t0}, Level: MaxFormat})
			}
			if typ == RemoveCandidateType {
				h.mustApply(PutCandidate{Header: Header{Now: t0}, Candidate: Candidate{Machine: "node-d", URL: "https://10.0.0.4:31413", Raft: "10.0.0.4:31412"}})
			}
			res := h.apply(stamped)
			if err, isErr := res.(error); isErr && errors.Is(err, ErrInvalidCommand) {
				t.Errorf("Apply(%s) = %v, want it applied", sp.name, err)
			}
			if got := h.f.LastNow(); got != stampedNow {
				t.Errorf("LastNow() after Apply(%s) = %d, want %d", sp.name, got, stampedNow)
			}
		})
	}
	for typ := range samples {
		if _, ok := commandTable[typ]; !ok {
			t.Errorf("sampleCommands() has a sample of type %d, which is not in the command table", typ)
		}
	}

	// Whether a Batch may hold a type is part of the format (a replica
	// refuses the others inside a batch), so the answer of every type is
	// pinned here: a new type must be added with its decision.
	wantBatchable := map[CommandType]bool{
		RegisterResourceType:  true,
		HeartbeatResourceType: true,
		DeleteResourceType:    true,
		AcquireLeaseType:      true,
		RenewLeaseType:        true,
		ReleaseLeaseType:      true,
		IssueTokenType:        true,
		RevokeTokenType:       true,
		ClaimPrimaryType:      false,
		SweepType:             false,
		BatchType:             false,
		SetFormatType:         false,
		PutCandidateType:      false,
		RemoveCandidateType:   false,
		SetLimitsType:         false,
	}
	for typ, sp := range commandTable {
		want, ok := wantBatchable[typ]
		if !ok {
			t.Errorf("type %d (%s) has no pinned batch decision in TestCommandTable", typ, sp.name)
			continue
		}
		if sp.inBatch != want || Batchable(typ) != want {
			t.Errorf("type %d (%s): inBatch %v, Batchable %v, want %v", typ, sp.name, sp.inBatch, Batchable(typ), want)
		}
		err := batchable(commandTable, typ)
		if want && err != nil {
			t.Errorf("batchable(%s) = %v, want nil", sp.name, err)
		}
		if !want && !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("batchable(%s) = %v, want %v", sp.name, err, ErrInvalidCommand)
		}
	}
	for typ := range wantBatchable {
		if _, ok := commandTable[typ]; !ok {
			t.Errorf("type %d has a pinned batch decision but is not in the command table", typ)
		}
	}
	if err := batchable(commandTable, 0x7e); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("batchable(unknown type) = %v, want %v", err, ErrInvalidCommand)
	}
}

// A command type missing from the table cannot be encoded or stamped.
type unregistered struct{ Header }

func (unregistered) Type() CommandType { return 0x7e }

func TestCommandTable_Unregistered(t *testing.T) {
	if _, err := Encode(unregistered{}); !errors.Is(err, ErrInvalidCommand) {
		t.Errorf("Encode(unregistered) error = %v, want %v", err, ErrInvalidCommand)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("Stamp(unregistered) did not panic")
		}
	}()
	Stamp(unregistered{}, t0)
}
