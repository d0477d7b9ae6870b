/**
 * Most lines one Logs call (`ctl logs -n`) may ask for. Unbounded, an
 * admin-group member asked for 2^31-1 lines on 128 streams at once (security
 * review 2, N3); ten thousand is more than a screen, a pager or a grep for
 * an error needs, and a longer history is read from the file itself.
 * Shared by the agent, which refuses more, and ctl, which says so before
 * asking.
 */
export const MAX_LOG_LINES = 10_000;
