package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/fastagent/fastagent/agent"
)

// Parameter schemas of the built-in tools, with pi's names.
var (
	readSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Path to the file to read (relative to the working directory, or absolute)"},
    "offset": {"type": "integer", "minimum": 1, "description": "Line number to start reading from (1-indexed)"},
    "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to read"}
  },
  "required": ["path"]
}`)
	bashSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "Bash command to execute"},
    "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "Timeout in seconds (optional, default 120)"}
  },
  "required": ["command"]
}`)
	editSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Path to the file to edit (relative to the working directory, or absolute)"},
    "oldText": {"type": "string", "description": "Exact text to find and replace (must match exactly, including whitespace)"},
    "newText": {"type": "string", "description": "New text to replace the old text with"}
  },
  "required": ["path", "oldText", "newText"]
}`)
	writeSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Path to the file to write (relative to the working directory, or absolute)"},
    "content": {"type": "string", "description": "Content to write to the file"}
  },
  "required": ["path", "content"]
}`)
)

// builtinSchemas holds the compiled schemas of the built-in tools, keyed by
// the schema text; it is computed once and never modified.
var builtinSchemas = sync.OnceValue(func() map[string]*jsonschema.Schema {
	m := make(map[string]*jsonschema.Schema)
	for _, s := range []json.RawMessage{readSchema, bashSchema, editSchema, writeSchema} {
		sch, err := compileSchema(s)
		if err != nil {
			panic(err) // the schemas above are constants
		}
		m[string(s)] = sch
	}
	return m
})

// ArgsError describes why a tool call's arguments do not match the tool's
// parameter schema, in terms the model can act on.
type ArgsError struct {
	Tool     string
	Problems []string
}

// Error lists the problems, prefixed with "tools: invalid arguments for <tool>: ".
func (e *ArgsError) Error() string {
	return fmt.Sprintf("tools: invalid arguments for %s: %s", e.Tool, strings.Join(e.Problems, "; "))
}

// ValidateArgs checks args against spec.Parameters and returns an *ArgsError
// naming each offending field. Schemas of the built-in tools are compiled
// once; others are compiled per call (use a Validator to cache them).
func ValidateArgs(spec agent.ToolSpec, args json.RawMessage) error {
	sch, err := schemaFor(spec, nil)
	if err != nil {
		return err
	}
	return validate(spec.Name, sch, args)
}

// Validator validates tool arguments, caching compiled schemas. It is safe
// for concurrent use; the zero value is ready.
type Validator struct {
	mu    sync.Mutex
	cache map[string]*jsonschema.Schema
}

// Validate is ValidateArgs with a schema cache.
func (v *Validator) Validate(spec agent.ToolSpec, args json.RawMessage) error {
	sch, err := schemaFor(spec, v)
	if err != nil {
		return err
	}
	return validate(spec.Name, sch, args)
}

func schemaFor(spec agent.ToolSpec, v *Validator) (*jsonschema.Schema, error) {
	params := bytes.TrimSpace(spec.Parameters)
	if len(params) == 0 || string(params) == "null" {
		return nil, nil
	}
	if sch, ok := builtinSchemas()[string(spec.Parameters)]; ok {
		return sch, nil
	}
	if v != nil {
		v.mu.Lock()
		sch, ok := v.cache[string(params)]
		v.mu.Unlock()
		if ok {
			return sch, nil
		}
	}
	sch, err := compileSchema(params)
	if err != nil {
		return nil, fmt.Errorf("tools: parameters schema of %s: %w", spec.Name, err)
	}
	if v != nil {
		v.mu.Lock()
		if v.cache == nil {
			v.cache = make(map[string]*jsonschema.Schema)
		}
		v.cache[string(params)] = sch
		v.mu.Unlock()
	}
	return sch, nil
}

func compileSchema(schema json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("tools: decode schema: %w", err)
	}
	const url = "mem:///parameters.json"
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("tools: add schema: %w", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("tools: compile schema: %w", err)
	}
	return sch, nil
}

func validate(tool string, sch *jsonschema.Schema, args json.RawMessage) error {
	raw := bytes.TrimSpace(args)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return &ArgsError{Tool: tool, Problems: []string{fmt.Sprintf("arguments are not valid JSON: %v", err)}}
	}
	if _, ok := inst.(map[string]any); !ok {
		return &ArgsError{Tool: tool, Problems: []string{fmt.Sprintf("arguments must be a JSON object, got %s", jsonType(inst))}}
	}
	if sch == nil {
		return nil
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &ArgsError{Tool: tool, Problems: []string{err.Error()}}
	}
	p := message.NewPrinter(language.English)
	var probs []string
	collect(ve, p, &probs)
	if len(probs) == 0 {
		probs = []string{ve.Error()}
	}
	return &ArgsError{Tool: tool, Problems: probs}
}

// collect appends a message for every leaf error under ve.
func collect(ve *jsonschema.ValidationError, p *message.Printer, out *[]string) {
	if len(ve.Causes) == 0 {
		*out = append(*out, describe(ve, p)...)
		return
	}
	for _, c := range ve.Causes {
		collect(c, p, out)
	}
}

func describe(ve *jsonschema.ValidationError, p *message.Printer) []string {
	field := strings.Join(ve.InstanceLocation, ".")
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		msgs := make([]string, len(k.Missing))
		for i, name := range k.Missing {
			if field != "" {
				name = field + "." + name
			}
			msgs[i] = fmt.Sprintf("missing required field %q", name)
		}
		return msgs
	case *kind.Type:
		want := strings.Join(k.Want, " or ")
		if field == "" {
			return []string{fmt.Sprintf("arguments must be a JSON %s, got %s", want, k.Got)}
		}
		return []string{fmt.Sprintf("field %q must be %s %s, got %s", field, article(want), want, k.Got)}
	case *kind.Minimum:
		return []string{fmt.Sprintf("field %q must be at least %s, got %s", field, ratString(k.Want), ratString(k.Got))}
	case *kind.ExclusiveMinimum:
		return []string{fmt.Sprintf("field %q must be greater than %s, got %s", field, ratString(k.Want), ratString(k.Got))}
	default:
		msg := k.LocalizedString(p)
		if field == "" {
			return []string{msg}
		}
		return []string{fmt.Sprintf("field %q: %s", field, msg)}
	}
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return fmt.Sprint(f)
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	default:
		return fmt.Sprintf("%T", v)
	}
}
