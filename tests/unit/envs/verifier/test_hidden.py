"""The hidden tests' sources as the literal checks read them: one per Python file of the
test_patch, whatever else the patch writes. The hidden tests' places are tested end to end
in tests/env/envs/verifier/test_hidden.py."""

import ast

from fleetrl.envs.verifier.hidden import added_python_sources

PATCH = """diff --git a/tests/test_a.py b/tests/test_a.py
new file mode 100644
--- /dev/null
+++ b/tests/test_a.py
@@ -0,0 +1,3 @@
+from a import f
+def test_f():
+    assert f(7) == 49
diff --git a/tests/expected.txt b/tests/expected.txt
new file mode 100644
--- /dev/null
+++ b/tests/expected.txt
@@ -0,0 +1 @@
+f of 7 is 49, not 14
diff --git "a/tests/test_\\303\\251.py" "b/tests/test_\\303\\251.py"
--- "a/tests/test_\\303\\251.py"
+++ "b/tests/test_\\303\\251.py"
@@ -1,2 +1,3 @@
 from a import f
+++x
+assert f(3) == 9
"""


def test_each_python_file_of_the_patch_is_one_source():
    sources = added_python_sources(PATCH)
    assert sources == [
        "from a import f\ndef test_f():\n    assert f(7) == 49",
        "++x\nassert f(3) == 9",  # only added lines; `+++` inside a hunk is content
    ]
    ast.parse(sources[0])  # the data file beside it does not spoil the parse


def test_a_patch_without_python_files_has_no_source():
    data_only = PATCH[PATCH.index("diff --git a/tests/expected") : PATCH.index('diff --git "')]
    assert added_python_sources(data_only) == []
    assert added_python_sources("") == []
