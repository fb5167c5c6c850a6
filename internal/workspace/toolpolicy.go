package workspace

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fastagent/fastagent/internal/egress"
	"github.com/fastagent/fastagent/internal/sandbox"
	"github.com/fastagent/fastagent/internal/toolrun"
	"github.com/fastagent/fastagent/internal/tools"
)

// ToolPolicy is the workspace-wide part of tools: in fastagent.yaml — how
// tool processes are confined and whether they have the network:
//
//	tools:
//	  sandbox: auto          # auto | namespaces | landlock | off
//	  network: off           # on: egress through the proxy, never the control plane
//	  networkAllow: []       # private addresses (CIDR) tools may reach with the network on
//	  bash: {network: on}    # per tool (and network: in a tool file or an mcpServers entry)
type ToolPolicy struct {
	// Sandbox is the mechanism setting (FASTAGENT_SANDBOX overrides it);
	// read when the worker starts.
	Sandbox string
	// Network is the default for bash, workspace tools and MCP stdio
	// servers.
	Network bool
	// NetworkAllow are private addresses tools with the network may reach.
	NetworkAllow []string
}

// policyKeys are the keys of tools: that are settings, not tool names.
var policyKeys = []string{"sandbox", "network", "networkAllow"}

// OnOff is a switch written on/off, true/false or yes/no.
type OnOff bool

// UnmarshalYAML accepts on, off, true, false, yes, no.
func (o *OnOff) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "on", "true", "yes":
			*o = true
			return nil
		case "off", "false", "no":
			*o = false
			return nil
		}
	}
	return typeError(n, "want on or off")
}

// UnmarshalYAML decodes a tool's settings strictly (an unknown key is an
// error, as everywhere in the file); a scalar or a list is kept for the
// tools: settings (sandbox, network, networkAllow) to claim.
func (c *ToolConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		c.setting = n
		return nil
	}
	known := map[string]bool{}
	t := reflect.TypeOf(ToolConfig{})
	for i := 0; i < t.NumField(); i++ {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			known[tag] = true
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !known[k.Value] {
			return typeError(k, fmt.Sprintf("field %s not found in type workspace.ToolConfig", k.Value))
		}
	}
	type plain ToolConfig
	return n.Decode((*plain)(c))
}

// claimToolPolicy moves the tools: settings out of the per-tool map into
// c.ToolPolicy, and refuses any other tool entry that is not a mapping.
func (c *Config) claimToolPolicy(path string) error {
	for _, name := range sortedKeys(c.Tools) {
		n := c.Tools[name].setting
		if n == nil {
			continue
		}
		bad := func(reason string) error {
			return &ConfigError{File: path, Line: n.Line, Key: "tools." + name, Reason: reason}
		}
		switch name {
		case "sandbox":
			if n.Kind != yaml.ScalarNode {
				return bad("want auto, namespaces, landlock or off")
			}
			if _, err := sandbox.ParseMode(n.Value); err != nil {
				return bad(fmt.Sprintf("%q is not one of auto, namespaces, landlock, off", n.Value))
			}
			c.ToolPolicy.Sandbox = n.Value
		case "network":
			var on OnOff
			if err := on.UnmarshalYAML(n); err != nil {
				return bad("want on or off")
			}
			c.ToolPolicy.Network = bool(on)
		case "networkAllow":
			var list []string
			if n.Kind != yaml.SequenceNode || n.Decode(&list) != nil {
				return bad("want a list of addresses or CIDR ranges, e.g. [10.1.0.0/16]")
			}
			if _, err := egress.ParsePrefixes(list); err != nil {
				return bad(err.Error())
			}
			c.ToolPolicy.NetworkAllow = list
		default:
			return bad(fmt.Sprintf("want a mapping of the tool's settings (timeout, maxAttempts, idempotent, requiresApproval, approvalTimeout, approvers, deferred, network); the workspace-wide settings here are %s",
				strings.Join(policyKeys, ", ")))
		}
		delete(c.Tools, name)
	}
	return nil
}

// ToolNetwork says whether the tool name has the network: its tools:
// entry, else what the tool itself declares (a tool file's or an MCP
// server's network:), else tools.network.
func (c Config) ToolNetwork(name string, declared *OnOff) bool {
	if tc, ok := c.Tools[name]; ok && tc.Network != nil {
		return bool(*tc.Network)
	}
	if declared != nil {
		return bool(*declared)
	}
	return c.ToolPolicy.Network
}

// Network reports whether the tool name runs with the network: bash, a
// workspace tool or an MCP stdio server's tool, as ToolNetwork decides;
// in-process tools (read, edit, write, Go tools) start no process.
func (d *Definition) Network(name string) bool {
	for _, e := range d.Tools {
		if e.Tool.Spec().Name != name {
			continue
		}
		switch {
		case e.Origin == OriginBuiltin && name == tools.NameBash:
			return d.Config.ToolNetwork(name, nil)
		case strings.HasPrefix(e.Origin, OriginWorkspace):
			if ct := commandOf(e.Tool); ct != nil {
				return ct.Network // resolved from the same config when the tool was loaded
			}
		case strings.HasPrefix(e.Origin, OriginMCP):
			if s, ok := d.Config.MCPServers[strings.TrimPrefix(e.Origin, OriginMCP)]; ok && s.Command != "" {
				return d.Config.mcpNetwork(s)
			}
		}
		return false
	}
	return false
}

// mcpNetwork is a stdio server's network: its own network:, else
// tools.network.
func (c Config) mcpNetwork(s MCPServer) bool {
	if s.Network != nil {
		return bool(*s.Network)
	}
	return c.ToolPolicy.Network
}

// commandOf unwraps a workspace tool.
func commandOf(t any) *toolrun.Tool {
	switch v := t.(type) {
	case *toolrun.Tool:
		return v
	case configuredTool:
		return commandOf(v.Tool)
	case deferredTool:
		return commandOf(v.Tool)
	}
	return nil
}
