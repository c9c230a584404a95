"""What the ``actline`` command line shows and reads on a terminal, apart from its arguments.

It owns the progress cards and result panels a turn prints (``cards``), the ``actline chat``
session (``chat``: the loop; ``commands``: its slash commands; ``presses``: what Ctrl-C does;
``lines``: reading stdin without blocking), reading and checking the files sent with a turn
(``attachments``) and running a command until SIGTERM or SIGHUP ends it cleanly
(``signals``). It may import the facade's ``config``, ``ratings`` and ``runtime`` and the
sub-packages beneath it (``actline.messages``, ``actline.bus``, ``actline.timeline``, the
client side of ``actline.actors``), and rich; it never imports ``actline.cli`` or
``actline.web``. The dependency goes one way: ``actline.cli`` imports this package (and the
web console its attachment checks), never the reverse. Nothing is imported here, so using
``cards`` does not load the chat.
"""
