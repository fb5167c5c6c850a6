package channels

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/tools"
)

// Defaults of FileLimits, shared by every channel that fetches files.
const (
	// DefaultMaxFileBytes caps one file, downloaded or sent (config
	// maxFileBytes).
	DefaultMaxFileBytes = 20 << 20
	// DefaultMaxImageBytes caps one image given to the model as vision
	// input (the smallest per-image limit of the major model APIs); a larger
	// image is saved as a file.
	DefaultMaxImageBytes = 3840 << 10 // 3.75 MiB
	// DefaultMaxImagesBytes caps the images of one prompt together. The
	// prompt Channel.Fetch returns is recorded in Temporal history, whose
	// payloads are limited to 2 MiB by default; images past this budget
	// (base64 grows them by a third) are saved as files instead.
	DefaultMaxImagesBytes = 1 << 20
	// DefaultFileTimeout bounds one download.
	DefaultFileTimeout = 30 * time.Second
)

// FileLimits bound the files a message brings in and the files the agent
// sends; zero values take the defaults.
type FileLimits struct {
	MaxFileBytes   int64
	MaxImageBytes  int64
	MaxImagesBytes int64
	Timeout        time.Duration
}

// WithDefaults returns l with every zero (or negative) limit set to its
// default.
func (l FileLimits) WithDefaults() FileLimits {
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.MaxImageBytes <= 0 {
		l.MaxImageBytes = DefaultMaxImageBytes
	}
	if l.MaxImagesBytes <= 0 {
		l.MaxImagesBytes = DefaultMaxImagesBytes
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultFileTimeout
	}
	return l
}

// visionTypes are the image types given to the model as vision input,
// decided by the bytes, not by the declared type.
var visionTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// Intake folds a message's downloaded files into its prompt with one
// policy for every channel: a PNG, JPEG, GIF or WebP image within the
// per-image cap and the prompt's image budget becomes vision input; any
// other file (or an image past a cap) is saved under Dir/Inbox, mode 0600,
// with a line naming its path.
type Intake struct {
	Limits FileLimits
	// Dir is the agent's workspace ("" = files cannot be saved).
	Dir string
	// Inbox is the folder files are saved in, relative to Dir
	// ("inbox/slack").
	Inbox string

	images     []agent.Image
	imageBytes int64
	lines      []string
}

// Add takes one downloaded file: id is its platform key (it prefixes the
// saved name), name its display name. Errors a retry cannot fix are
// Permanent.
func (in *Intake) Add(id, name string, data []byte) error {
	lim := in.Limits.WithDefaults()
	if name == "" {
		name = id
	}
	typ := http.DetectContentType(data)
	if visionTypes[typ] && int64(len(data)) <= lim.MaxImageBytes && in.imageBytes+int64(len(data)) <= lim.MaxImagesBytes {
		in.imageBytes += int64(len(data))
		in.images = append(in.images, agent.Image{MimeType: typ, Data: base64.StdEncoding.EncodeToString(data)})
		in.lines = append(in.lines, fmt.Sprintf("[image attached: %s, %s]", name, tools.FormatSize(len(data))))
		return nil
	}
	if in.Dir == "" {
		return Permanent(errors.New("this worker has no workspace to save files in"))
	}
	rel := path.Join(in.Inbox, SafeFileName(id, name))
	if err := tools.WriteWorkspaceFile(in.Dir, rel, data, 0o600); err != nil {
		return Permanent(fmt.Errorf("save: %w", err))
	}
	in.lines = append(in.lines, fmt.Sprintf("[file saved at %s: %s, %s]", rel, name, tools.FormatSize(len(data))))
	return nil
}

// Note adds a line of text after the prompt's own (e.g. a file that was
// skipped).
func (in *Intake) Note(line string) { in.lines = append(in.lines, line) }

// Prompt returns p with the images taken so far appended to its images and
// their lines appended to its text.
func (in *Intake) Prompt(p agent.Prompt) agent.Prompt {
	out := agent.Prompt{Text: p.Text, Images: append(append([]agent.Image(nil), p.Images...), in.images...)}
	if len(in.lines) > 0 {
		if strings.TrimSpace(out.Text) != "" {
			out.Text += "\n\n"
		}
		out.Text += strings.Join(in.lines, "\n")
	}
	return out
}

// SafeFileName is the name a platform file is saved under: its ID, a dash
// and its name reduced to letters, digits, '.', '-' and '_' (no
// separators, no leading dot), at most 100 bytes; it cannot name a path
// outside the inbox folder.
func SafeFileName(id, name string) string {
	clean := func(s string, keepDot bool) string {
		var b strings.Builder
		for _, c := range s {
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
				b.WriteRune(c)
			case c == '.' && keepDot:
				b.WriteRune(c)
			default:
				b.WriteByte('_')
			}
		}
		return b.String()
	}
	id = clean(id, false)
	if id == "" {
		id = "file"
	}
	base := strings.TrimLeft(clean(name, true), "._")
	if base == "" {
		base = "file"
	}
	const maxLen = 100
	if len(base) > maxLen {
		ext := path.Ext(base)
		if len(ext) > 16 {
			ext = ""
		}
		base = base[:maxLen-len(ext)] + ext
	}
	return id + "-" + base
}
