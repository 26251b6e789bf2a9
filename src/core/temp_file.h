// An unnamed temporary file (O_TMPFILE): it has no name, so nothing else can open it and
// nothing is left behind when it is closed or the process dies. A file system without
// O_TMPFILE (some overlays) gets a named file that is unlinked at once.
#pragma once

#include <string>

namespace tahua {

// A read-write descriptor (close-on-exec), or -1 with `error` saying why.
int openTempFile(const std::string& dir, std::string& error);

// Where uploads are spooled: `configured`, else $TMPDIR, else /tmp.
std::string spoolDirectory(const std::string& configured);

}  // namespace tahua
