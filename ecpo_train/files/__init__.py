"""File helpers below every layer that writes or checks a file: whole-file replacement without writing through links
(``atomic``) and the checksums a saved folder carries (``checksums``)."""
