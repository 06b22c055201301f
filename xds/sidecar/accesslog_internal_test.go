package sidecar

import (
	"testing"

	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"

	"github.com/vmesh/vmesh/model"
)

// fileLog follows Istio's FileAccessLogFromMeshConfig (the oracle compares
// whole listeners for the default formats); here the edges: no file, a
// text format without its newline, a JSON format that does not parse.
func TestFileLog(t *testing.T) {
	if fileLog(model.AccessLog{Format: "x"}) != nil {
		t.Error("an access log without a file")
	}
	decode := func(m model.AccessLog) *filev3.FileAccessLog {
		t.Helper()
		f := &filev3.FileAccessLog{}
		if err := fileLog(m).GetTypedConfig().UnmarshalTo(f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := decode(model.AccessLog{File: "/var/log/a.log", Format: "%RESPONSE_CODE% %REQ_WITHOUT_QUERY(:PATH)%"})
	if got := f.GetLogFormat().GetTextFormatSource().GetInlineString(); got != "%RESPONSE_CODE% %REQ_WITHOUT_QUERY(:PATH)%\n" || f.GetPath() != "/var/log/a.log" {
		t.Errorf("text format %q, path %q", got, f.GetPath())
	}
	if fs := f.GetLogFormat().GetFormatters(); len(fs) != 1 || fs[0].GetName() != reqWithoutQuery {
		t.Errorf("formatters %v, want req_without_query for its operator", fs)
	}
	j := decode(model.AccessLog{File: "/dev/stdout", JSON: true, Format: "[%START_TIME%]"})
	if got := j.GetLogFormat().GetJsonFormat().GetFields(); len(got) != len(istioJSONLogFields) || got["response_code"].GetStringValue() != "%RESPONSE_CODE%" {
		t.Errorf("JSON format from a text format: %v, want Istio's default fields", got)
	}
	if fs := j.GetLogFormat().GetFormatters(); len(fs) != 0 {
		t.Errorf("formatters %v for a format without their operators", fs)
	}
	c := decode(model.AccessLog{File: "/dev/stdout", JSON: true, Format: `{"code": "%RESPONSE_CODE%"}`})
	if got := c.GetLogFormat().GetJsonFormat().GetFields(); len(got) != 1 || got["code"].GetStringValue() != "%RESPONSE_CODE%" {
		t.Errorf("custom JSON format: %v", got)
	}
}
