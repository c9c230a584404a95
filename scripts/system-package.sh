#!/bin/sh
# Install a system package the tests need when its command is missing, if root or
# passwordless sudo can; never fails (the tests that need it say what is missing).
#   scripts/system-package.sh COMMAND PACKAGE WHY
# e.g. scripts/system-package.sh bwrap bubblewrap "code.exec_python's bubblewrap layer"
command=$1 package=$2 why=$3
found() { command -v "$command" >/dev/null 2>&1 || test -x "/usr/bin/$command"; }
found && exit 0
hint="install $package (apt-get install $package, dnf install $package or apk add $package): $why"
if [ "$(id -u)" = 0 ]; then su=""
elif sudo -n true 2>/dev/null; then su="sudo -n"
else echo "$command is missing and this user cannot install it: $hint"; exit 0; fi
if command -v apt-get >/dev/null 2>&1; then
	$su env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" >/dev/null 2>&1 ||
		{ $su apt-get update -q >/dev/null 2>&1 &&
		  $su env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$package" >/dev/null; }
elif command -v dnf >/dev/null 2>&1; then $su dnf install -y -q "$package"
elif command -v apk >/dev/null 2>&1; then $su apk add -q "$package"; fi
if found; then echo "installed $package for $command"; else echo "$package could not be installed: $hint"; fi
exit 0
