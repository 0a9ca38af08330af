// Added by tests/cluster/build.sh to a copy of sigs.k8s.io/kwok v0.8.0 (never to the module cache): what the
// control-plane tier's node emulator needs from the kwok "kubelet" that upstream KWOK does not give it.

package server

import (
	"context"
	"errors"
	osexec "os/exec"
	"strings"
	"syscall"

	utilexec "k8s.io/utils/exec"

	utilsexec "sigs.k8s.io/kwok/pkg/utils/exec"
)

// rdmakitWithPod puts the pod an exec is for into the local command's environment: KWOK's ClusterExec gives
// one command line for every pod it selects, so without this the command cannot tell which pod it runs in.
func rdmakitWithPod(ctx context.Context, namespace, name, uid, container string) context.Context {
	return utilsexec.WithEnv(ctx, []string{
		"KWOK_EXEC_POD_NAMESPACE=" + namespace,
		"KWOK_EXEC_POD_NAME=" + name,
		"KWOK_EXEC_POD_UID=" + uid,
		"KWOK_EXEC_CONTAINER=" + container,
	})
}

// rdmakitExitCode turns a command's exit status into the error type cri-streaming's ServeExec reports as a
// NonZeroExitCode with the code (it type-asserts k8s.io/utils/exec.ExitError; KWOK wraps *os/exec.ExitError
// in fmt.Errorf, so every non-zero exit reached the client as an internal error, exit -1). A command killed
// by a signal exits 128+signal, as a container runtime reports it.
func rdmakitExitCode(err error) error {
	var ee *osexec.ExitError
	if err == nil || !errors.As(err, &ee) {
		return err
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// rdmakitLogsFile expands {namespace}, {pod} and {container} in a ClusterLogs logsFile: one cluster-wide
// ClusterLogs then serves every container its own log file.
func rdmakitLogsFile(file, namespace, name, container string) string {
	return strings.NewReplacer("{namespace}", namespace, "{pod}", name, "{container}", container).Replace(file)
}
