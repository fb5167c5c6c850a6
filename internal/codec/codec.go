// Package codec encrypts every payload fastagent writes to Temporal
// (workflow, update and activity arguments and results, memos,
// continue-as-new snapshots) and every failure's message and stack trace
// with AES-256-GCM, so history at rest holds no prompt, answer or error
// text in clear. Keys come from the worker's environment
// (FASTAGENT_CODEC_KEYS or FASTAGENT_CODEC_KEY_FILE); the first key
// encrypts, every key decrypts, so a key is rotated by adding the new one
// first. The same codec serves the Temporal Web UI and CLI through the
// remote codec protocol (Handler).
package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// Environment variables that configure the codec.
const (
	EnvKeys     = "FASTAGENT_CODEC_KEYS"     // id:base64key[,id:base64key…]
	EnvKeyFile  = "FASTAGENT_CODEC_KEY_FILE" // same format, one or more per line
	EnvCompress = "FASTAGENT_CODEC_COMPRESS" // "1" or "true": zlib before encrypting
)

// Payload metadata written on every encrypted payload.
const (
	// Encoding is the metadata "encoding" of an encrypted payload.
	Encoding = "binary/encrypted"
	// MetadataKeyID names the key that encrypted the payload.
	MetadataKeyID = "encryption-key-id"
	// MetadataCipher names the cipher.
	MetadataCipher = "encryption-cipher"
	cipherName     = "AES256-GCM"
)

// ErrUnknownKey is returned when a payload was encrypted with a key that is
// not configured.
var ErrUnknownKey = errors.New("codec: payload encrypted with a key that is not configured")

// Key is one named AES-256 key.
type Key struct {
	ID  string
	Key []byte // 32 bytes
}

// Codec is an AES-256-GCM converter.PayloadCodec with key rotation.
type Codec struct {
	keys     []Key
	aeads    map[string]cipher.AEAD
	compress bool
}

// New returns a codec that encrypts with keys[0] and decrypts with any of
// keys; compress zlib-compresses payloads before encrypting them.
func New(keys []Key, compress bool) (*Codec, error) {
	if len(keys) == 0 {
		return nil, errors.New("codec: no keys")
	}
	c := &Codec{keys: keys, aeads: make(map[string]cipher.AEAD, len(keys)), compress: compress}
	for _, k := range keys {
		if k.ID == "" {
			return nil, errors.New("codec: a key has an empty id")
		}
		if len(k.Key) != 32 {
			return nil, fmt.Errorf("codec: key %q is %d bytes; AES-256 needs 32", k.ID, len(k.Key))
		}
		if _, dup := c.aeads[k.ID]; dup {
			return nil, fmt.Errorf("codec: key id %q appears twice", k.ID)
		}
		block, err := aes.NewCipher(k.Key)
		if err != nil {
			return nil, fmt.Errorf("codec: key %q: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("codec: key %q: %w", k.ID, err)
		}
		c.aeads[k.ID] = aead
	}
	return c, nil
}

// ParseKeys reads "id:base64key" entries separated by commas or newlines;
// blank lines and lines starting with # are skipped. Keys may be standard
// or URL-safe base64, padded or not.
func ParseKeys(text string) ([]Key, error) {
	var keys []Key
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, entry := range strings.Split(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			id, b64, ok := strings.Cut(entry, ":")
			id = strings.TrimSpace(id)
			if !ok || id == "" {
				return nil, fmt.Errorf("codec: key entry %d is not id:base64key", len(keys)+1)
			}
			raw, err := decodeBase64(strings.TrimSpace(b64))
			if err != nil {
				return nil, fmt.Errorf("codec: key %q is not base64: %w", id, err)
			}
			keys = append(keys, Key{ID: id, Key: raw})
		}
	}
	return keys, nil
}

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	_, err := base64.StdEncoding.DecodeString(s)
	return nil, err
}

// FromEnv builds the codec from FASTAGENT_CODEC_KEYS, FASTAGENT_CODEC_KEY_FILE
// (keys from both; the variable's come first) and FASTAGENT_CODEC_COMPRESS,
// read through getenv. It returns nil, nil when no key is configured.
func FromEnv(getenv func(string) string) (*Codec, error) {
	keys, err := ParseKeys(getenv(EnvKeys))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvKeys, err)
	}
	if path := strings.TrimSpace(getenv(EnvKeyFile)); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvKeyFile, err)
		}
		more, err := ParseKeys(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", EnvKeyFile, path, err)
		}
		keys = append(keys, more...)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	compress := false
	switch strings.ToLower(strings.TrimSpace(getenv(EnvCompress))) {
	case "", "0", "false":
	case "1", "true":
		compress = true
	default:
		return nil, fmt.Errorf("%s: want 1 or 0, got %q", EnvCompress, getenv(EnvCompress))
	}
	return New(keys, compress)
}

// KeyID is the id of the key that encrypts.
func (c *Codec) KeyID() string { return c.keys[0].ID }

// Codecs returns the payload codecs in the order converter.NewCodecDataConverter
// and converter.NewPayloadCodecHTTPHandler expect: encryption, then (when
// compressing) zlib, which therefore runs first on encode.
func (c *Codec) Codecs() []converter.PayloadCodec {
	cs := []converter.PayloadCodec{c}
	if c.compress {
		cs = append(cs, converter.NewZlibCodec(converter.ZlibCodecOptions{}))
	}
	return cs
}

// DataConverter wraps the SDK's default data converter with the codec.
func (c *Codec) DataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c.Codecs()...)
}

// FailureConverter is the SDK's default failure converter with encoded
// attributes: a failure's message and stack trace (an activity's or
// workflow's error, an update rejection, at every level of the cause
// chain) travel as one payload encrypted by the codec, and the failure
// itself says only "Encoded failure". Error types and retry settings stay
// readable. Clients and workers with the codec decode the message again,
// so callers see it unchanged; the Web UI decodes it through the codec
// server.
func (c *Codec) FailureConverter() converter.FailureConverter {
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter:          c.DataConverter(),
		EncodeCommonAttributes: true,
	})
}

// Handler serves Temporal's remote codec protocol (POST …/encode and
// …/decode) with this codec; authentication and CORS are the caller's.
func (c *Codec) Handler() http.Handler {
	return converter.NewPayloadCodecHTTPHandler(c.Codecs()...)
}

// Encode implements converter.PayloadCodec: each payload, serialised whole
// (metadata and data), is sealed with the first key; the key id is bound
// into the ciphertext as additional data.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	k := c.keys[0]
	aead := c.aeads[k.ID]
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("codec: marshal payload: %w", err)
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, fmt.Errorf("codec: nonce: %w", err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(Encoding),
				MetadataKeyID:              []byte(k.ID),
				MetadataCipher:             []byte(cipherName),
			},
			Data: aead.Seal(nonce, nonce, plain, []byte(k.ID)),
		}
	}
	return out, nil
}

// Decode implements converter.PayloadCodec. Payloads that are not encrypted
// pass through unchanged (history written before encryption was enabled).
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != Encoding {
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[MetadataKeyID])
		aead, ok := c.aeads[id]
		if !ok {
			return nil, fmt.Errorf("%w: key id %q (configured: %s; add it to %s)", ErrUnknownKey, id, c.ids(), EnvKeys)
		}
		data := p.GetData()
		if len(data) < aead.NonceSize() {
			return nil, fmt.Errorf("codec: encrypted payload too short (%d bytes)", len(data))
		}
		plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte(id))
		if err != nil {
			return nil, fmt.Errorf("codec: decrypt with key %q failed (wrong key material or corrupted payload): %w", id, err)
		}
		var dec commonpb.Payload
		if err := proto.Unmarshal(plain, &dec); err != nil {
			return nil, fmt.Errorf("codec: decrypted payload: %w", err)
		}
		out[i] = &dec
	}
	return out, nil
}

func (c *Codec) ids() string {
	ids := make([]string, len(c.keys))
	for i, k := range c.keys {
		ids[i] = k.ID
	}
	return strings.Join(ids, ", ")
}
