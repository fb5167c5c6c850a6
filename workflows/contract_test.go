package workflows_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/workflows"
	"github.com/fastagent/fastagent/workflows/agentloop"
)

// contractPage is the page that documents the Temporal API.
const contractPage = "../docs/temporal-api.md"

// contractExamples are the types a JSON example of the page may be labelled
// with (```json <type>).
var contractExamples = map[string]func() any{
	"SessionInput":      func() any { return new(workflows.SessionInput) },
	"TurnRequest":       func() any { return new(workflows.TurnRequest) },
	"agentloop.Outcome": func() any { return new(agentloop.Outcome) },
	"AbortRequest":      func() any { return new(workflows.AbortRequest) },
	"AbortResult":       func() any { return new(workflows.AbortResult) },
	"SteerRequest":      func() any { return new(workflows.SteerRequest) },
	"ApproveRequest":    func() any { return new(workflows.ApproveRequest) },
	"AnswerRequest":     func() any { return new(workflows.AnswerRequest) },
	"CompactRequest":    func() any { return new(workflows.CompactRequest) },
	"CompactResult":     func() any { return new(workflows.CompactResult) },
	"RewindRequest":     func() any { return new(workflows.RewindRequest) },
	"RewindResult":      func() any { return new(workflows.RewindResult) },
	"ResendRequest":     func() any { return new(workflows.ResendRequest) },
	"Delivery":          func() any { return new(workflows.Delivery) },
	"SessionView":       func() any { return new(workflows.SessionView) },
	"FireInput":         func() any { return new(workflows.FireInput) },
	"FireRecord":        func() any { return new(workflows.FireRecord) },
}

// jsonExample is one ```json <type> block of the page.
type jsonExample struct {
	typ  string
	line int
	body []byte
}

func contractPageText(t *testing.T) (string, []jsonExample) {
	t.Helper()
	b, err := os.ReadFile(contractPage)
	if err != nil {
		t.Fatalf("the Temporal API's page: %v", err)
	}
	var examples []jsonExample
	var cur *jsonExample
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```json "):
			cur = &jsonExample{typ: strings.TrimSpace(strings.TrimPrefix(line, "```json ")), line: n}
		case cur != nil && line == "```":
			examples = append(examples, *cur)
			cur = nil
		case cur != nil:
			cur.body = append(cur.body, line+"\n"...)
		}
	}
	return string(b), examples
}

// Every JSON example of docs/temporal-api.md is labelled with its type and
// decodes into it with no field the type lacks: the page shows payloads as
// the workflows read and write them.
func TestContractExamplesDecode(t *testing.T) {
	t.Parallel()
	_, examples := contractPageText(t)
	if len(examples) < len(contractExamples) {
		t.Errorf("the page has %d labelled JSON examples, want one of each of %d types", len(examples), len(contractExamples))
	}
	seen := map[string]bool{}
	for _, ex := range examples {
		newV, ok := contractExamples[ex.typ]
		if !ok {
			t.Errorf("%s:%d: an example of %q, which is not a payload of the contract", contractPage, ex.line, ex.typ)
			continue
		}
		seen[ex.typ] = true
		dec := json.NewDecoder(bytes.NewReader(ex.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(newV()); err != nil {
			t.Errorf("%s:%d: the %s example does not decode: %v", contractPage, ex.line, ex.typ, err)
		}
	}
	for typ := range contractExamples {
		if !seen[typ] {
			t.Errorf("the page has no example of %s", typ)
		}
	}
}

// Every type and every name callers use — workflow types, the task queue,
// updates, signals, the query, search attributes and their status values,
// fire outcomes — is on the page: the package exports nothing the contract
// does not document.
func TestContractNamesDocumented(t *testing.T) {
	t.Parallel()
	page, _ := contractPageText(t)
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				switch sp := spec.(type) {
				case *ast.TypeSpec:
					if sp.Name.IsExported() && !strings.Contains(page, "`"+sp.Name.Name+"`") && contractExamples[sp.Name.Name] == nil {
						t.Errorf("%s: the page does not name the exported type %s", fset.Position(sp.Pos()), sp.Name.Name)
					}
				case *ast.ValueSpec:
					for i, n := range sp.Names {
						if !contractName(n.Name) || i >= len(sp.Values) {
							continue
						}
						lit, ok := sp.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, _ := strconv.Unquote(lit.Value)
						want := "`" + v + "`"
						if strings.HasSuffix(n.Name, "Prefix") {
							want = "`" + v // as in `schedule:<name>`
						}
						if !strings.Contains(page, want) {
							t.Errorf("%s: the page does not name %s (`%s`)", fset.Position(n.Pos()), n.Name, v)
						}
					}
				}
			}
		}
	}
}

// contractName reports whether a constant of the package names something of
// the contract.
func contractName(name string) bool {
	for _, prefix := range []string{"Update", "Signal", "Query", "Attr", "Status", "Fire"} {
		if strings.HasPrefix(name, prefix) && !strings.HasPrefix(name, "FireWorkflowID") {
			return true
		}
	}
	return name == "TaskQueue" || strings.HasSuffix(name, "WorkflowType") || name == "ScheduleIDPrefix" || name == "FireWorkflowIDPrefix"
}
