module github.com/vmesh/vmesh/tools/testsummary

go 1.26
