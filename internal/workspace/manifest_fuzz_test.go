package workspace

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// FuzzManifest feeds arbitrary bytes to the tool manifest parser: it must
// never panic, and a manifest it accepts must have a description, a command
// and parameters that are a JSON object schema.
func FuzzManifest(f *testing.F) {
	f.Add("weather.yaml", []byte("description: Weather.\ncommand: echo sunny\n"))
	f.Add("t.yaml", []byte("description: x\nparameters: {type: object, properties: {a: {type: string}}}\ncommand: [./t.sh, --x]\ntimeout: 5s\nidempotent: true\noutput: json\n"))
	f.Add("t.json", []byte(`{"description":"x","command":"true","parameters":{"type":"object"}}`))
	f.Add("bad.yaml", []byte("description: [\n"))
	f.Add("t.yaml", []byte("description: x\ncommand: y\ntimeout: -1s\n"))
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		dir := "/agent/tools"
		path := filepath.Join(dir, filepath.Base(name))
		def, err := parseManifest(path, filepath.Join("tools", filepath.Base(name)), body)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		if def.Description == "" || def.Name == "" {
			t.Fatalf("accepted a manifest without name or description: %q", body)
		}
		var schema map[string]any
		if json.Unmarshal(def.Params, &schema) != nil || schema["type"] != "object" {
			t.Fatalf("accepted parameters that are not an object schema: %s", def.Params)
		}
		if def.Timeout < 0 {
			t.Fatalf("negative timeout accepted: %s", def.Timeout)
		}
	})
}
