package tools

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fastagent/fastagent/agent"
)

func TestValidateArgs(t *testing.T) {
	t.Parallel()
	specs := testTools(Options{})
	cases := []struct {
		tool string
		args string
		want []string // substrings of the error; nil means valid
	}{
		{NameRead, `{"path":"a.txt"}`, nil},
		{NameRead, `{"path":"a.txt","offset":10,"limit":5}`, nil},
		{NameRead, `{"path":"a.txt","offset":2.0}`, nil},
		{NameRead, `{"path":"a.txt","extra":true}`, nil},
		{NameRead, `{}`, []string{`missing required field "path"`}},
		{NameRead, ``, []string{`missing required field "path"`}},
		{NameRead, `null`, []string{`missing required field "path"`}},
		{NameRead, `{"path":7}`, []string{`field "path" must be a string, got number`}},
		{NameRead, `{"path":"a","offset":"3"}`, []string{`field "offset" must be an integer, got string`}},
		{NameRead, `{"path":"a","offset":1.5}`, []string{`field "offset" must be an integer, got number`}},
		{NameRead, `{"path":"a","limit":0}`, []string{`field "limit" must be at least 1, got 0`}},
		{NameBash, `{"command":"ls"}`, nil},
		{NameBash, `{"command":"ls","timeout":2.5}`, nil},
		{NameBash, `{"command":"ls","timeout":"10"}`, []string{`field "timeout" must be a number, got string`}},
		{NameBash, `{"command":"ls","timeout":-1}`, []string{`field "timeout" must be greater than 0, got -1`}},
		{NameBash, `{"cmd":"ls"}`, []string{`missing required field "command"`}},
		{NameEdit, `{"path":"a","oldText":"x","newText":""}`, nil},
		{NameEdit, `{"path":"a"}`, []string{`"oldText"`, `"newText"`}},
		{NameEdit, `{"path":"a","oldText":null,"newText":"y"}`, []string{`field "oldText" must be a string, got null`}},
		{NameWrite, `{"path":"a","content":""}`, nil},
		{NameWrite, `{"content":"x"}`, []string{`missing required field "path"`}},
		{NameWrite, `[1,2]`, []string{`must be a JSON object, got array`}},
		{NameWrite, `"x"`, []string{`must be a JSON object, got string`}},
		{NameWrite, `{"path":`, []string{`not valid JSON`}},
	}
	for _, c := range cases {
		spec := specs[c.tool].Spec()
		err := ValidateArgs(spec, json.RawMessage(c.args))
		if c.want == nil {
			if err != nil {
				t.Errorf("%s %s: unexpected error %v", c.tool, c.args, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s %s: no error", c.tool, c.args)
			continue
		}
		var ae *ArgsError
		if !errors.As(err, &ae) || ae.Tool != c.tool {
			t.Errorf("%s %s: error %T %v is not an *ArgsError for the tool", c.tool, c.args, err, err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "tools: invalid arguments for "+c.tool+": ") {
			t.Errorf("%s %s: message %q lacks the prefix", c.tool, c.args, msg)
		}
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s %s: message %q does not contain %q", c.tool, c.args, msg, w)
			}
		}
	}
}

func TestValidatorCustomSchema(t *testing.T) {
	t.Parallel()
	spec := agent.ToolSpec{Name: "custom", Parameters: json.RawMessage(`{
		"type":"object",
		"properties":{"n":{"type":"integer","maximum":3},"tags":{"type":"array","items":{"type":"string"}},
		  "opt":{"type":"object","properties":{"k":{"type":"string"}},"required":["k"]}},
		"required":["n"]}`)}
	var v Validator
	for range 2 { // second round hits the cache
		if err := v.Validate(spec, json.RawMessage(`{"n":2,"tags":["a"]}`)); err != nil {
			t.Fatalf("valid args: %v", err)
		}
		err := v.Validate(spec, json.RawMessage(`{"n":5,"tags":["a",1],"opt":{}}`))
		if err == nil {
			t.Fatal("invalid args accepted")
		}
		for _, w := range []string{`field "n"`, `field "tags.1" must be a string`, `missing required field "opt.k"`} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("message %q does not contain %q", err, w)
			}
		}
	}
	if err := ValidateArgs(spec, json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), `"n"`) {
		t.Errorf("ValidateArgs without cache: %v", err)
	}
	if err := ValidateArgs(agent.ToolSpec{Name: "noparams"}, json.RawMessage(`{"any":1}`)); err != nil {
		t.Errorf("no schema: %v", err)
	}
	bad := agent.ToolSpec{Name: "bad", Parameters: json.RawMessage(`{"type":"nonsense"}`)}
	if err := v.Validate(bad, json.RawMessage(`{}`)); err == nil || !strings.HasPrefix(err.Error(), "tools: ") {
		t.Errorf("bad schema: %v", err)
	}
}
