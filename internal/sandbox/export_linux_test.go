package sandbox

// WithLandlockABI returns c with its helper using Landlock ABI abi where the
// kernel has a newer one: a test takes an older kernel's path here.
func WithLandlockABI(c Config, abi int) Config {
	c.landlockABI = abi
	return c
}

// KernelLandlockABI is the kernel's Landlock ABI version.
func KernelLandlockABI() int { return landlockABI() }
