//go:build tools

// Keeps the operators' commands in this module's requirement graph (go mod tidy reads this file).
package tools

import (
	_ "github.com/kubeflow/mpi-operator/cmd/mpi-operator"
	_ "github.com/ray-project/kuberay/ray-operator"
)
