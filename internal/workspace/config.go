package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ConfigFile is the name of the definition's config file.
const ConfigFile = "fastagent.yaml"

// Config is fastagent.yaml. Unknown keys and bad values are errors that name
// the file, the key and the reason.
type Config struct {
	// Model is "provider/model", e.g. openai/gpt-4o-mini; FASTAGENT_MODEL overrides it.
	Model string `yaml:"model"`
	// ThinkingLevel is off, low, medium or high.
	ThinkingLevel string `yaml:"thinkingLevel"`
	// AgentDir moves the agent surface into a subfolder of the working directory.
	AgentDir string `yaml:"agentDir"`
	// CodingTools is true (all built-ins, the default), false (none) or a list of names.
	CodingTools CodingTools `yaml:"codingTools"`
	// MaxSteps bounds model calls per turn.
	MaxSteps int `yaml:"maxSteps"`
	// Retry tunes model-call retries and worker-loss detection.
	Retry RetryConfig `yaml:"retry"`
	// Tools holds per-tool settings by tool name.
	Tools map[string]ToolConfig `yaml:"tools"`
	// Env names extra environment variables passed to bash and workspace tools.
	Env []string `yaml:"env"`
	// MCPServers are Model Context Protocol servers whose tools the agent gets.
	MCPServers map[string]MCPServer `yaml:"mcpServers"`
	// HTTP is where the ingress listens.
	HTTP HTTPConfig `yaml:"http"`
	// SelfSchedule enables the wake and unwake tools.
	SelfSchedule bool `yaml:"selfSchedule"`
}

// RetryConfig tunes model-call retries.
type RetryConfig struct {
	ModelAttempts int      `yaml:"modelAttempts"`
	ModelTimeout  Duration `yaml:"modelTimeout"`
	// Heartbeat is how long a silent worker may go before its call is
	// declared lost.
	Heartbeat Duration `yaml:"heartbeat"`
}

// ToolConfig overrides one tool's runtime settings.
type ToolConfig struct {
	Timeout          Duration `yaml:"timeout"`
	MaxAttempts      int      `yaml:"maxAttempts"`
	Idempotent       *bool    `yaml:"idempotent"`
	RequiresApproval *bool    `yaml:"requiresApproval"`
	Deferred         *bool    `yaml:"deferred"`
}

// MCPServer is one MCP server: a command (stdio) or a URL (streamable HTTP).
type MCPServer struct {
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	URL     string            `yaml:"url"`
	// Deferred keeps the server's tools out of the request until activated.
	Deferred bool `yaml:"deferred"`
}

// HTTPConfig is the ingress address.
type HTTPConfig struct {
	Host string `yaml:"host"`
	Port int    `yaml:"port"`
}

// CodingTools selects built-in coding tools.
type CodingTools struct {
	Set   bool
	All   bool
	Names []string
}

// UnmarshalYAML accepts a bool or a list of tool names.
func (c *CodingTools) UnmarshalYAML(n *yaml.Node) error {
	c.Set = true
	var b bool
	if err := n.Decode(&b); err == nil {
		c.All = b
		return nil
	}
	var names []string
	if err := n.Decode(&names); err != nil {
		return fmt.Errorf("line %d: codingTools must be true, false or a list of tool names (read, bash, edit, write)", n.Line)
	}
	for _, name := range names {
		switch name {
		case "read", "bash", "edit", "write":
		default:
			return fmt.Errorf("line %d: codingTools: unknown coding tool %q (known: read, bash, edit, write)", n.Line, name)
		}
	}
	c.Names = names
	return nil
}

// Enabled reports whether the built-in tool name is on.
func (c CodingTools) Enabled(name string) bool {
	if !c.Set || c.All {
		return !c.Set || c.All
	}
	for _, n := range c.Names {
		if n == name {
			return true
		}
	}
	return false
}

// Duration is a time.Duration written as "30s", "5m" or a number of seconds.
type Duration time.Duration

// UnmarshalYAML parses "90s", "2m" or 90.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var secs float64
	if err := n.Decode(&secs); err == nil {
		if secs < 0 {
			return fmt.Errorf("line %d: duration must not be negative", n.Line)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration like 30s or 5m", n.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration like 30s or 5m", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

var modelSpec = regexp.MustCompile(`^(openai|anthropic|ollama)/\S+$`)

// LoadConfig reads fastagent.yaml from dir; a missing file yields defaults.
func LoadConfig(dir string) (Config, error) {
	var c Config
	path := dir + string(os.PathSeparator) + ConfigFile
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("%s: %s", path, cleanYAMLError(err))
	}
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func cleanYAMLError(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n")
	s = strings.ReplaceAll(s, "field ", "unknown key ")
	s = strings.ReplaceAll(s, " not found in type workspace.", " (not a key of ")
	s = regexp.MustCompile(`\(not a key of (\w+)`).ReplaceAllString(s, "(not a key of $1; see README, Configuration)")
	return strings.TrimSpace(s)
}

func (c Config) validate() error {
	if c.Model != "" && !modelSpec.MatchString(c.Model) {
		return fmt.Errorf("model: %q is not provider/model with provider openai, anthropic or ollama (e.g. openai/gpt-4o-mini)", c.Model)
	}
	switch c.ThinkingLevel {
	case "", "off", "low", "medium", "high":
	default:
		return fmt.Errorf("thinkingLevel: %q is not one of off, low, medium, high", c.ThinkingLevel)
	}
	if c.MaxSteps < 0 || c.MaxSteps > 1000 {
		return fmt.Errorf("maxSteps: %d is out of range 1..1000", c.MaxSteps)
	}
	if c.Retry.ModelAttempts < 0 || c.Retry.ModelAttempts > 100 {
		return fmt.Errorf("retry.modelAttempts: %d is out of range 1..100", c.Retry.ModelAttempts)
	}
	if c.Retry.Heartbeat != 0 && time.Duration(c.Retry.Heartbeat) < time.Second {
		return fmt.Errorf("retry.heartbeat: must be at least 1s")
	}
	if c.HTTP.Port < 0 || c.HTTP.Port > 65535 {
		return fmt.Errorf("http.port: %d is not a TCP port", c.HTTP.Port)
	}
	for name, t := range c.Tools {
		if t.MaxAttempts < 0 || t.MaxAttempts > 100 {
			return fmt.Errorf("tools.%s.maxAttempts: %d is out of range 1..100", name, t.MaxAttempts)
		}
	}
	for name, m := range c.MCPServers {
		if (m.Command == "") == (m.URL == "") {
			return fmt.Errorf("mcpServers.%s: set exactly one of command (stdio) or url (streamable HTTP)", name)
		}
	}
	for _, e := range c.Env {
		if e == "" || strings.ContainsAny(e, "= ") {
			return fmt.Errorf("env: %q is not an environment variable name", e)
		}
	}
	return nil
}
