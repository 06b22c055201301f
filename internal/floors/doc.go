// Package floors holds no code: its test checks that vmesh's imports run one
// way (filestore ← model ← xds ← cmd, with ca, registries and agents beside
// them), that internal/ packages are leaves, and that composition roots
// live under cmd/.
package floors
