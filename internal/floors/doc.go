// Package floors holds no code: its test checks that vmesh's imports run one
// way (filestore ← model ← xds ← cmd, with ca, registries and agents beside
// them), that internal/ packages are leaves, that composition roots live
// under cmd/, and that nothing outside xds's table of proxy kinds and the
// kind packages decides by proxy kind.
package floors
