package workspace

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

var deferredTools = map[string]string{
	"tools/calendar_events.yaml": "description: List the calendar events between two dates.\ndeferred: true\ncommand: echo '[]'\n",
	"tools/send_invoice.yaml":    "description: Email an invoice PDF to a customer.\ndeferred: true\ncommand: cat\n",
	"tools/weather.yaml":         "description: Current weather for a city.\ncommand: cat\n",
}

func TestSearchToolsActivates(t *testing.T) {
	t.Parallel()
	cases := []struct {
		query string
		want  []string
	}{
		{query: "calendar", want: []string{"calendar_events"}},
		{query: "upcoming Events", want: []string{"calendar_events"}},
		{query: "email invoices to customers", want: []string{"send_invoice"}},
		{query: "send_invoice", want: []string{"send_invoice"}},
		{query: "dates or customer", want: []string{"calendar_events", "send_invoice"}},
		{query: "weather", want: []string{}}, // not deferred: already available
		{query: "spaceship", want: []string{}},
	}
	d := load(t, deferredTools, nil)
	if o := origins(d)[SearchToolsName]; o != OriginBuiltin {
		t.Fatalf("search_tools origin %q; tools %v", o, origins(d))
	}
	before := d.ActiveSpecs(nil)
	if hasSpec(before, "calendar_events") || hasSpec(before, "send_invoice") || !hasSpec(before, "weather") || !hasSpec(before, SearchToolsName) {
		t.Fatalf("before activation: %v", specNames(before))
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			t.Parallel()
			args, _ := json.Marshal(map[string]string{"query": c.query})
			res := runTool(t, d, SearchToolsName, string(args))
			if res.IsError {
				t.Fatal(res.Content)
			}
			var details SearchDetails
			if err := json.Unmarshal(res.Details, &details); err != nil {
				t.Fatalf("details %s: %v", res.Details, err)
			}
			if !reflect.DeepEqual(details.Activated, c.want) {
				t.Fatalf("activated %v, want %v (content %q)", details.Activated, c.want, res.Content)
			}
			if got := ActivatedTools(res.Details); !reflect.DeepEqual(got, c.want) {
				t.Errorf("ActivatedTools = %v", got)
			}
			for _, name := range c.want {
				if !strings.Contains(res.Content, "- "+name+": ") {
					t.Errorf("content does not list %s: %q", name, res.Content)
				}
			}
			if len(c.want) == 0 && !strings.Contains(res.Content, "calendar_events, send_invoice") {
				t.Errorf("no-match content should name what can be activated: %q", res.Content)
			}
			after := d.ActiveSpecs(details.Activated)
			for _, name := range c.want {
				if !hasSpec(after, name) {
					t.Errorf("ActiveSpecs after activation lacks %s: %v", name, specNames(after))
				}
			}
			if len(after) != len(before)+len(c.want) {
				t.Errorf("ActiveSpecs grew by %d, want %d", len(after)-len(before), len(c.want))
			}
		})
	}
}

func TestSearchToolsPresence(t *testing.T) {
	t.Parallel()
	if d := load(t, map[string]string{"tools/weather.yaml": deferredTools["tools/weather.yaml"]}, nil); hasSpec(d.ActiveSpecs(nil), SearchToolsName) {
		t.Error("search_tools added although no tool is deferred")
	}
	// A tool deferred by the config counts too.
	d := load(t, map[string]string{"tools/weather.yaml": deferredTools["tools/weather.yaml"], "fastagent.yaml": "tools:\n  weather:\n    deferred: true\n"}, nil)
	if specs := d.ActiveSpecs(nil); !hasSpec(specs, SearchToolsName) || hasSpec(specs, "weather") {
		t.Errorf("config-deferred: %v", specNames(specs))
	}
	// An authored search_tools wins over the built-in one.
	files := map[string]string{"tools/search_tools.yaml": "description: my search\nparameters: {properties: {query: {type: string}}}\ncommand: cat\n"}
	for k, v := range deferredTools {
		files[k] = v
	}
	d = load(t, files, nil)
	if o := origins(d)[SearchToolsName]; o != "workspace:tools/search_tools.yaml" {
		t.Errorf("authored search_tools origin %q", o)
	}
	if len(d.Collisions) != 0 {
		t.Errorf("collisions %v", d.Collisions)
	}
}

func TestActivatedToolsIgnoresOtherDetails(t *testing.T) {
	t.Parallel()
	for _, details := range []string{``, `{"fullOutput": "x"}`, `not json`, `{"activated": "x"}`} {
		if got := ActivatedTools(json.RawMessage(details)); got != nil {
			t.Errorf("ActivatedTools(%s) = %v", details, got)
		}
	}
}
