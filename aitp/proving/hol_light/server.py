"""The OCaml side of the HOL Light backend, loaded into one toplevel after HOL Light's library.

The loaded toplevel listens on a Unix socket and forks a child per connection (a fork is cheap where
loading the library is not), so every session starts from the same fully loaded state. A child keeps a
table of goals; a request names a goal by id and a tactic as an s-expression, which the child
*interprets* over tables of known tactics, conversions and library theorems: no OCaml is ever evaluated
from a request, and terms are parsed as data by `parse_term`. Each tactic, the parsing of its terms
included, runs under a timer of the child's own CPU time (so a loaded machine does not turn successes
into timeouts); the timeout exception leaves the child usable. `CONV_TAC` takes a conversion from its
own table, and is listed among the tactics when that table is not empty. The final check rebuilds the
theorem with `prove` from the proof tree (`THENL`), and compares it with the library statement, no
hypotheses, no new axioms.

Framing: a decimal byte length, a newline, then the payload; responses are lines (`ok`, `err`,
`timeout`, then fields with newlines flattened).
"""

from __future__ import annotations

from aitp.proving.hol_light.tactics import HOL_CONVS, HOL_TACTICS

# Plain OCaml, evaluated through the compiler's own parser: HOL Light's syntax extension reads
# ALL-CAPS names as values, so Unix constructors (ITIMER_REAL, PF_UNIX, ...) can only be named here.
HELPERS_ML = r"""
(* The session's own CPU time, not wall time: other jobs on the machine must not turn a tactic that
   would succeed into a timeout (a blocked child is still caught by the owner's wall-clock deadline). *)
let aitp_set_timer secs = ignore (Unix.setitimer Unix.ITIMER_VIRTUAL {Unix.it_interval = 0.0; Unix.it_value = secs})
let aitp_listen path =
  (try Unix.unlink path with Unix.Unix_error _ -> ());
  let sock = Unix.socket Unix.PF_UNIX Unix.SOCK_STREAM 0 in
  Unix.bind sock (Unix.ADDR_UNIX path);
  Unix.listen sock 64;
  sock
(* The owner holds our stdin: when it closes (the owner exited or died), the server exits too. *)
let aitp_accept sock =
  match (try Unix.select [sock; Unix.stdin] [] [] (-1.0) with Unix.Unix_error (Unix.EINTR, _, _) -> ([], [], [])) with
  | (ready, _, _) when List.mem Unix.stdin ready && Unix.read Unix.stdin (Bytes.create 1) 0 1 = 0 -> exit 0
  | (ready, _, _) when List.mem sock ready ->
      (try Some (fst (Unix.accept sock)) with Unix.Unix_error (Unix.EINTR, _, _) -> None)
  | _ -> None
let aitp_devnull () = Unix.openfile "/dev/null" [Unix.O_RDWR] 0
let aitp_exit () = Unix._exit 0
"""

PRELUDE_ML = r"""
#load "unix.cma";;
let aitp_use_plain path =
  let ic = open_in path in
  let phrases = Parse.use_file (Lexing.from_channel ic) in
  close_in ic;
  List.iter (fun p -> ignore (Toploop.execute_phrase false Format.std_formatter p)) phrases;;
"""

SERVER_ML = r"""

type aitp_sexp = Atom of string | Str of string | Lst of aitp_sexp list;;
exception Aitp_timeout;;

let aitp_parse_sexp (s : string) : aitp_sexp =
  let n = String.length s in
  let pos = ref 0 in
  let blank c = c = ' ' || c = '\n' || c = '\t' in
  let skip () = while !pos < n && blank s.[!pos] do incr pos done in
  let rec parse () =
    skip ();
    if !pos >= n then failwith "sexp: unexpected end" else
    if s.[!pos] = '(' then begin
      incr pos;
      let items = ref [] in
      skip ();
      while !pos < n && s.[!pos] <> ')' do items := parse () :: !items; skip () done;
      if !pos >= n then failwith "sexp: missing )";
      incr pos;
      Lst (List.rev !items)
    end else if s.[!pos] = '"' then begin
      incr pos;
      let b = Buffer.create 32 in
      while !pos < n && s.[!pos] <> '"' do
        (if s.[!pos] = '\\' && !pos + 1 < n then incr pos);
        Buffer.add_char b s.[!pos];
        incr pos
      done;
      if !pos >= n then failwith "sexp: missing quote";
      incr pos;
      Str (Buffer.contents b)
    end else begin
      let start = !pos in
      while !pos < n && not (blank s.[!pos]) && s.[!pos] <> '(' && s.[!pos] <> ')' && s.[!pos] <> '"' do
        incr pos
      done;
      Atom (String.sub s start (!pos - start))
    end in
  parse ();;

let aitp_tac0 : (string, tactic) Hashtbl.t = Hashtbl.create 64;;
let aitp_tac_thms : (string, thm list -> tactic) Hashtbl.t = Hashtbl.create 64;;
let aitp_tac_thm : (string, thm -> tactic) Hashtbl.t = Hashtbl.create 64;;
let aitp_tac_term : (string, term -> tactic) Hashtbl.t = Hashtbl.create 64;;
let aitp_tac_thmtac : (string, thm_tactic -> tactic) Hashtbl.t = Hashtbl.create 64;;
let aitp_convs : (string, conv) Hashtbl.t = Hashtbl.create 64;;
let aitp_thms : (string, thm) Hashtbl.t = Hashtbl.create 4096;;
List.iter (fun (n, th) -> Hashtbl.replace aitp_thms n th) (!theorems);;

let aitp_find tbl kind name =
  try Hashtbl.find tbl name with Not_found -> failwith ("unknown " ^ kind ^ " " ^ name);;

let aitp_term e = match e with
  | Str s -> let tm = parse_term s in tm
  | _ -> failwith "expected a term";;

let rec aitp_thm e = match e with
  | Lst [Atom "name"; Atom n] -> aitp_find aitp_thms "theorem" n
  | Lst [Atom "gsym"; t] -> GSYM (aitp_thm t)
  | Lst [Atom "conjunct1"; t] -> CONJUNCT1 (aitp_thm t)
  | Lst [Atom "conjunct2"; t] -> CONJUNCT2 (aitp_thm t)
  | Lst [Atom "spec"; tm; t] -> SPEC (aitp_term tm) (aitp_thm t)
  | Lst [Atom "specl"; Lst tms; t] -> SPECL (List.map aitp_term tms) (aitp_thm t)
  | _ -> failwith "bad theorem expression";;

let rec aitp_tactic e = match e with
  | Lst [Atom "then"; a; b] -> let ta = aitp_tactic a and tb = aitp_tactic b in ta THEN tb
  | Lst [Atom "thenl"; a; Lst bs] -> let ta = aitp_tactic a and tbs = List.map aitp_tactic bs in ta THENL tbs
  | Lst [Atom "orelse"; a; b] -> let ta = aitp_tactic a and tb = aitp_tactic b in ta ORELSE tb
  | Lst [Atom "repeat"; a] -> REPEAT (aitp_tactic a)
  | Lst [Atom "try"; a] -> TRY (aitp_tactic a)
  | Lst [Atom "tac"; Atom n] -> aitp_find aitp_tac0 "tactic" n
  | Lst [Atom "thms"; Atom n; Lst ths] -> let f = aitp_find aitp_tac_thms "tactic" n in f (List.map aitp_thm ths)
  | Lst [Atom "thm"; Atom n; th] -> let f = aitp_find aitp_tac_thm "tactic" n in f (aitp_thm th)
  | Lst [Atom "term"; Atom n; tm] -> let f = aitp_find aitp_tac_term "tactic" n in f (aitp_term tm)
  | Lst [Atom "thmtac"; Atom n; Atom t] ->
      let f = aitp_find aitp_tac_thmtac "tactical" n and g = aitp_find aitp_tac_thm "tactic" t in f g
  | Lst [Atom "conv"; Atom c] -> CONV_TAC (aitp_find aitp_convs "conversion" c)
  | _ -> failwith "bad tactic expression";;

let aitp_with_timeout secs f x =
  Sys.set_signal Sys.sigvtalrm (Sys.Signal_handle (fun _ -> raise Aitp_timeout));
  aitp_set_timer secs;
  try let r = f x in aitp_set_timer 0.0; r with e -> aitp_set_timer 0.0; raise e;;

let aitp_oneline s = String.map (fun c -> if c = '\n' || c = '\r' then ' ' else c) s;;
let aitp_goals : (int, goal) Hashtbl.t = Hashtbl.create 4096;;
let aitp_next = ref 0;;
let aitp_add_goal g = incr aitp_next; Hashtbl.replace aitp_goals (!aitp_next) g; !aitp_next;;
let aitp_show ((asl, w) : goal) =
  String.concat "\t" (List.map (fun (_, th) -> aitp_oneline (string_of_term (concl th))) (rev asl))
  ^ "\n" ^ aitp_oneline (string_of_term w);;
let aitp_reply_goal g = let i = aitp_add_goal g in string_of_int i ^ "\n" ^ aitp_show g;;

let aitp_target e = match e with
  | Lst [Atom "name"; Atom n] -> concl (aitp_find aitp_thms "theorem" n)
  | Lst [Atom "term"; tm] -> let t = aitp_term tm in if type_of t = bool_ty then t else failwith "not a proposition"
  | _ -> failwith "bad target";;

let rec aitp_proof e = match e with
  | Lst [Atom "step"; t; Lst []] -> aitp_tactic t
  | Lst [Atom "step"; t; Lst kids] -> let tac = aitp_tactic t in tac THENL (List.map aitp_proof kids)
  | _ -> failwith "bad proof";;

let aitp_handle req = match req with
  | Lst [Atom "ping"] -> "ok"
  | Lst [Atom "open"; target] -> "ok\n" ^ aitp_reply_goal ([], aitp_target target)
  | Lst [Atom "run"; Atom id; Atom secs; tac] ->
      let g = (try Hashtbl.find aitp_goals (int_of_string id) with Not_found -> failwith "unknown goal id") in
      (* Building the tactic parses its terms: that counts against the timer too. *)
      let ((mvs, _), gls, _) = aitp_with_timeout (float_of_string secs) (fun g -> aitp_tactic tac g) g in
      if mvs <> [] then failwith "tactic introduced metavariables" else
      String.concat "\n" (("ok " ^ string_of_int (List.length gls)) :: List.map aitp_reply_goal gls)
  | Lst [Atom "check"; target; Atom secs; proof] ->
      let tm = aitp_target target in
      let before = List.length (axioms ()) in
      let th = aitp_with_timeout (float_of_string secs) (fun tm -> prove (tm, aitp_proof proof)) tm in
      if hyp th <> [] then failwith "the rebuilt theorem has hypotheses"
      else if not (aconv (concl th) tm) then failwith "the rebuilt theorem differs from the statement"
      else if List.length (axioms ()) <> before then failwith "new axioms appeared"
      else "ok"
  | Lst [Atom "tactics"] ->
      let names tbl = Hashtbl.fold (fun k _ acc -> k :: acc) tbl [] in
      let conv_tac = if Hashtbl.length aitp_convs > 0 then ["CONV_TAC"] else [] in
      "ok\n" ^ String.concat " " (names aitp_tac0 @ names aitp_tac_thms @ names aitp_tac_thm
                                  @ names aitp_tac_term @ names aitp_tac_thmtac @ conv_tac @ names aitp_convs)
  | _ -> failwith "unknown request";;

let aitp_read_frame ic = let n = int_of_string (input_line ic) in really_input_string ic n;;
let aitp_write_frame oc s =
  output_string oc (string_of_int (String.length s)); output_char oc '\n'; output_string oc s; flush oc;;

let aitp_session fd =
  let ic = Unix.in_channel_of_descr fd and oc = Unix.out_channel_of_descr fd in
  aitp_write_frame oc ("ok\n" ^ string_of_int (Unix.getpid ()));
  try
    while true do
      let req = aitp_read_frame ic in
      let resp =
        try aitp_handle (aitp_parse_sexp req) with
        | Aitp_timeout -> "timeout"
        | Failure s -> "err\n" ^ aitp_oneline s
        | e -> "err\n" ^ aitp_oneline (Printexc.to_string e) in
      aitp_write_frame oc resp
    done
  with End_of_file -> ();;

let aitp_serve path =
  let devnull = aitp_devnull () in
  let sock = aitp_listen path in
  Sys.set_signal Sys.sigchld Sys.Signal_ignore;
  print_string "AITP_SERVING\n"; flush stdout;
  while true do
    match aitp_accept sock with
    | None -> ()
    | Some fd ->
        if Unix.fork () = 0 then begin
          Unix.close sock;
          Unix.dup2 devnull Unix.stdout;
          Unix.dup2 devnull Unix.stderr;
          (try aitp_session fd with _ -> ());
          aitp_exit ()
        end else Unix.close fd
  done;;
"""

_TABLES = {"": "aitp_tac0", "thms": "aitp_tac_thms", "thm": "aitp_tac_thm", "term": "aitp_tac_term"}
_TABLES["thmtac"] = "aitp_tac_thmtac"


def server_script(directory: str, socket_path: str) -> str:
    """Write the OCaml files into `directory`; return what to type into the loaded toplevel."""
    helpers = f"{directory}/helpers.ml"
    server = f"{directory}/server.ml"
    with open(helpers, "w") as f:
        f.write(HELPERS_ML)
    with open(server, "w") as f:
        f.write(PRELUDE_ML + f'aitp_use_plain "{helpers}";;\n' + SERVER_ML)
    return f'#use "{server}";;\n{registrations()}aitp_serve "{socket_path}";;\n'


def registrations() -> str:
    """One toplevel phrase per allowlisted name, so a name this HOL Light lacks only fails its own phrase."""
    lines = []
    for name, kind in HOL_TACTICS.items():
        if kind in _TABLES:
            lines.append(f'Hashtbl.replace {_TABLES[kind]} "{name}" {name};;')
    lines.extend(f'Hashtbl.replace aitp_convs "{name}" {name};;' for name in sorted(HOL_CONVS))
    return "\n".join(lines) + "\n"
