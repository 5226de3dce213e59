# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Chat iterativo: um cache para a conversa inteira
#
# **Objetivo de aprendizagem.** Depois deste notebook, você consegue rodar um loop de chat que passa um único
# `DynamicCache` a cada chamada de `generate`, dizer quantos tokens cada turno realmente pré-preenche e reconhecer a
# única forma pela qual isso dá errado em silêncio: um chat template que renderiza os turnos anteriores de um
# jeito diferente de como eles foram gerados.
#
# **Nas palavras do kvlab.** Um prompt de chat é a conversa inteira até aqui. Com um cache novo a cada turno, o
# modelo relê tudo a cada vez. Passe o *mesmo* cache a cada chamada de `generate`, junto com os ids da conversa
# inteira, e o transformers pré-preenche apenas `ids[cache_length:]`: o fim da última resposta, a nova mensagem do
# usuário e o cabeçalho do assistente. Esse atalho se apoia em uma suposição que ninguém verifica: a de que os
# primeiros `cache_length` ids do novo prompt são exatamente os tokens cujas chaves e valores o cache guarda.
#
# SmolLM2-135M-Instruct com o seu template ChatML, decodificação greedy, CPU.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import os
import warnings

import ipywidgets as widgets
import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure.chat import THINK_DROPPING_TEMPLATE, ChatSession, first_mismatch, turn_prefills
from kvlab.live import live
from kvlab.measure import timing
from kvlab.plots.prefill_bars import plot_prefill_bars
from kvlab.plots.turns import alignment_counts, plot_id_alignment, plot_turn_prefills
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
user_prompts = [
    "What does a KV cache store? One sentence.",
    "Why does that make generation faster?",
    "What does it cost in exchange?",
]
SYSTEM = ("You are a patient tutor who explains how language models run on ordinary computers. Keep every "
          "answer short and concrete, avoid jargon where a plain word will do, and when you use a technical term, "
          "say in a few words what it means. The learner is a programmer who knows Python but has never looked "
          "inside a transformer. They care about memory, speed, and what can go wrong.")
NEW_TOKENS = 16  # as respostas param aqui, no meio da frase, para o notebook continuar rápido
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # uma repetição cronometrada na suíte de testes; as saídas verificadas valem de qualquer forma

# %% [markdown]
# ## 1. Geração iterativa
#
# O loop: crie um único `DynamicCache` vazio, mantenha a conversa em uma lista `messages` e, a cada turno, renderize
# a lista inteira com o chat template, gere com o mesmo cache, decodifique apenas os tokens novos e anexe-os como
# a mensagem do assistente.

# %%
past_key_values = DynamicCache(config=model.config)
messages = [{"role": "system", "content": SYSTEM}]
for prompt in user_prompts:
    messages.append({"role": "user", "content": prompt})
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    input_length = inputs["input_ids"].shape[1]
    outputs = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, past_key_values=past_key_values)
    completion = tokenizer.decode(outputs[0, input_length:], skip_special_tokens=True)
    messages.append({"role": "assistant", "content": completion})
    print(f"prompt de {input_length} tokens, cache agora com {past_key_values.get_seq_length()}: {completion!r}")

# %% [markdown]
# As respostas estão erradas, e não só cortadas em 16 tokens: um cache KV não é "a type of data storage device" (um
# tipo de dispositivo de armazenamento), e sim as chaves e os valores dos tokens que o modelo já leu (notebook 00); ele
# acelera a geração porque não os recalcula, não porque supere uma CPU; e o que ele custa é memória, não dinheiro. O
# SmolLM2-135M é um modelo pequeno e erra fatos assim; o que este notebook observa é o cache, não as respostas.
#
# **Preveja primeiro.** O prompt do turno 3 tem 170 tokens (impresso acima). Um cache novo pré-preencheria tudo isso.
# Quantos tokens o turno 3 pré-preenche com o cache reutilizado?

# %%
guess = None  # tokens que o turno 3 pré-preenche com o cache reutilizado: seu palpite

# %% [markdown]
# O mesmo loop dentro de `kvlab.watch`, uma vez com o cache reutilizado e outra com um `DynamicCache` novo a cada
# turno (a única mudança: o cache é criado dentro do loop). Os acréscimos só medem: um cronômetro em volta de
# `generate` e um streamer que anota quando chega cada token novo (`timing.DecodeClock`, passado como `streamer=`),
# cujo primeiro token novo marca o fim do pré-preenchimento. Uma medição por turno diz pouco numa CPU compartilhada;
# por isso os dois loops rodam 3 vezes, alternando-se (reutilizado, novo, reutilizado, ...); os tempos de cada turno
# são resumidos pela mediana e pelo intervalo interquartil (IQR) e comparados como uma razão com o seu intervalo.

# %%
def run_chat(prompts, new_tokens, reuse):
    """The loop above; returns the replies, each turn's generate time and its time to the first new token (s)."""
    past_key_values = DynamicCache(config=model.config)
    messages, replies, seconds, first_token = [{"role": "system", "content": SYSTEM}], [], [], []
    for prompt in prompts:
        if not reuse:
            past_key_values = DynamicCache(config=model.config)
        messages.append({"role": "user", "content": prompt})
        inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        input_length = inputs["input_ids"].shape[1]
        clock = timing.DecodeClock()  # um streamer que só anota o instante em que cada token novo chega
        with timing.Stopwatch() as stopwatch:
            outputs = model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens,
                                     past_key_values=past_key_values, streamer=clock)
        seconds.append(stopwatch.seconds)
        first_token.append(clock.prefill_seconds)
        replies.append(outputs[0, input_length:].tolist())
        messages.append({"role": "assistant", "content": tokenizer.decode(replies[-1], skip_special_tokens=True)})
    return replies, seconds, first_token


def per_turn(repeats, label):
    """One `Timing` per turn, from each repeat's list of per-turn seconds."""
    return [timing.Timing(label, list(times)) for times in zip(*repeats)]


REPEATS = 1 if QUICK else 3
reused_calls, reused_firsts, fresh_calls, fresh_firsts = [], [], [], []
for repeat in range(REPEATS):  # intercalados, para que um momento ocupado da máquina afete os dois loops igualmente
    with kvlab.watch(model) as reused:
        reused_replies, seconds, first_token = run_chat(user_prompts, NEW_TOKENS, reuse=True)
    reused_calls.append(seconds)
    reused_firsts.append(first_token)
    with kvlab.watch(model) as fresh:
        fresh_replies, seconds, first_token = run_chat(user_prompts, NEW_TOKENS, reuse=False)
    fresh_calls.append(seconds)
    fresh_firsts.append(first_token)
# por turno: os tempos das repetições (as observações da última repetição ficam para as contagens abaixo)
reused_turns, fresh_turns = per_turn(reused_calls, label="cache reutilizado"), per_turn(fresh_calls, label="cache novo")
reused_first, fresh_first = per_turn(reused_firsts, label="cache reutilizado"), per_turn(fresh_firsts, label="cache novo")

# %%
# NBVAL_CHECK_OUTPUT
reused_prefill = turn_prefills(reused.trace)  # um cache: um trace, um pré-preenchimento por turno
fresh_prefill = [turn_prefills(trace)[0] for trace in fresh.traces]  # um cache (e um trace) por turno
display(score(guess, reused_prefill[2], unit=" tokens", kind="count"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"caches vistos: {len(reused.traces)} no chat com reutilização, {len(fresh.traces)} no chat com cache novo")
print("tokens pré-preenchidos por turno, reutilizado:", reused_prefill, "| novo:", fresh_prefill)
print("mesmas respostas:", reused_replies == fresh_replies)
print("comprimento do cache reutilizado no final:", reused.caches[0].get_seq_length())

# %%
# Tempos (não verificados: dependem da máquina). Por turno: medianas de 3 execuções intercaladas (1 na suíte
# de testes) e a razão reutilizado / novo com seu intervalo de 95%; primeiro até o primeiro token novo (o pré-preenchimento), depois
# a chamada inteira de generate.
first_token_verdicts = []  # um por turno, impresso aqui e desenhado sob a figura
for turn, (fresh_turn, reused_turn) in enumerate(zip(fresh_first, reused_first), start=1):
    first_token_verdicts.append(timing.compare(fresh_turn, reused_turn, warn=False).verdict())
    print(f"turno {turn}, primeiro token: {fresh_turn.describe()} novo | {reused_turn.describe()} reutilizado")
    print(f"    {first_token_verdicts[-1]}")
for turn, (fresh_turn, reused_turn) in enumerate(zip(fresh_turns, reused_turns), start=1):
    print(f"turno {turn}, chamada inteira: {fresh_turn.describe()} novo | {reused_turn.describe()} reutilizado")
    print(f"    {timing.compare(fresh_turn, reused_turn, warn=False).verdict()}")

# %%
plot_prefill_bars({"um cache reutilizado": list(zip(reused_prefill, reused_first)),
                   "cache novo a cada turno": list(zip(fresh_prefill, fresh_first))},
                  "turno", "ms até o primeiro token (mediana, IQR)",
                  f"SmolLM2, {len(user_prompts)} turnos, {NEW_TOKENS} tokens novos cada",
                  verdicts=first_token_verdicts)

# %% [markdown]
# No turno 1, os dois pré-preenchem os mesmos tokens (o cache está vazio): o mesmo trabalho; então qualquer diferença
# entre os dois tempos é ruído, e o seu intervalo deve conter 1. Do turno 2 em diante, o cache reutilizado pré-preenche
# apenas o que falta no cache: o prompt do turno 2 tem 136 tokens e o cache guardava 117 depois do turno 1
# (102 + 16 novos - 1), então 19. São o novo turno do usuário e o cabeçalho do assistente, mais duas coisas de antes:
# o último token da resposta anterior (`generate` o produziu, mas nunca o realimentou, então o cache não o guarda) e o
# marcador de fim de turno `<|im_end|>\n` com que o template fecha essa resposta. O cache novo pré-preenche a conversa
# inteira, que não para de crescer. Mesmas respostas, menos trabalho: as contagens de tokens acima são exatas.
#
# O tempo até o primeiro token novo é onde esse trabalho aparece: é o pré-preenchimento, um forward sobre 19 tokens
# com o cache reutilizado contra 136 ou 170 com um cache novo. Os vereditos dele estão impressos acima da figura e
# desenhados embaixo dela; um intervalo que contém 1 significa nenhuma diferença detectável. A chamada inteira de
# `generate` acrescenta 15 forwards de decodificação depois do pré-preenchimento (16 tokens novos), os mesmos com
# qualquer um dos dois caches; ali, então, a economia é uma parte menor do tempo: os vereditos impressos dela dizem se
# ela ainda aparece acima do ruído nesta execução. O trabalho economizado cresce com a conversa, porque um cache novo
# relê todos os turnos anteriores e o reutilizado só o turno novo: 117 tokens que não são pré-preenchidos de novo no
# turno 2, 151 no turno 3 (o notebook 08 monta um prefixo longo). Se o tempo economizado também cresce é outra
# comparação, turno contra turno, que estes vereditos não fazem: cada um pesa os dois caches dentro de um turno, e
# intervalos de dois turnos que se sobrepõem não distinguem crescimento algum do ruído.

# %% [markdown]
# ## Ao vivo: turnos e tamanho da resposta
#
# Mude o número de turnos e o de tokens novos por turno: os dois loops rodam de novo (SmolLM2, duas chamadas a
# `generate` por turno) e as barras mostram quantos tokens cada turno pré-preencheu, segundo os traces do
# `kvlab.watch`. Com respostas mais longas, cada pré-preenchimento seguinte do cache novo fica mais longo; o do
# cache reutilizado continua do tamanho do novo turno.

# %%
MORE_PROMPTS = user_prompts + ["Give one example.", "Summarise in five words."]


def prefill_per_turn(turns, new_tokens):
    with kvlab.watch(model) as reused:
        run_chat(MORE_PROMPTS[:turns], new_tokens, reuse=True)
    with kvlab.watch(model) as fresh:
        run_chat(MORE_PROMPTS[:turns], new_tokens, reuse=False)
    return plot_turn_prefills({"um cache reutilizado": turn_prefills(reused.trace),
                               "cache novo a cada turno": [turn_prefills(trace)[0] for trace in fresh.traces]},
                              title=f"SmolLM2, {turns} turnos, {new_tokens} tokens novos cada")


live(prefill_per_turn,
     turns=widgets.IntSlider(value=3, min=1, max=len(MORE_PROMPTS), continuous_update=False, description="turnos"),
     new_tokens=widgets.IntSlider(value=4, min=2, max=24, step=2, continuous_update=False, description="tokens novos"))

# %% [markdown]
# ## 2. Quando o template reescreve o histórico
#
# O guia avisa que `apply_chat_template` pode não renderizar um turno anterior do assistente do jeito que ele foi
# gerado: modelos que raciocinam dentro de `<think> ... </think>` podem perder esses tokens quando a conversa é
# recodificada, e o cache passa a guardar chaves e valores de tokens que não estão mais no prompt. O chat template
# do Qwen3 com o raciocínio desativado é escrito assim: o seu prompt de geração abre o turno do assistente com um
# bloco vazio `<think>\n\n</think>\n\n`, enquanto os turnos anteriores do assistente são renderizados a partir do
# texto que vem depois de `</think>` (fonte: o `chat_template` do Qwen/Qwen3-235B-A22B no Hugging Face Hub, lido linha
# a linha no post do blog do Hugging Face "The 4 Things Qwen-3's Chat Template Teaches Us"; este notebook não carrega
# o Qwen3). `THINK_DROPPING_TEMPLATE` é o ChatML do SmolLM2 remodelado para se comportar assim, para podermos observar
# o efeito no nosso modelo: as células depois do seu palpite imprimem onde os ids com que o cache foi alimentado e o
# prompt do turno 2 se separam. O loop é o de cima, com `chat_template=` acrescentado.
#
# **Preveja primeiro.** O transformers puro pré-preenche `prompt[cache_length:]` sem comparar nenhum id. A resposta
# do turno 2 com o cache reutilizado vai ser igual à resposta de um cache novo ao mesmo prompt (True ou False)?

# %%
guess_same_reply = None  # True se o cache reutilizado dá a resposta do cache novo: seu palpite

# %%
past_key_values = DynamicCache(config=model.config)
messages, prompts = [], []
for prompt in user_prompts[:2]:
    messages.append({"role": "user", "content": prompt})
    inputs = tokenizer.apply_chat_template(messages, chat_template=THINK_DROPPING_TEMPLATE, add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    prompts.append(inputs["input_ids"][0].tolist())
    cached_ids = outputs[0, :past_key_values.get_seq_length()].tolist() if len(prompts) > 1 else []
    input_length = inputs["input_ids"].shape[1]
    outputs = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, past_key_values=past_key_values)
    completion = tokenizer.decode(outputs[0, input_length:], skip_special_tokens=True)
    messages.append({"role": "assistant", "content": completion})
stale_reply = completion
# O prompt do turno 2 de novo, num cache novo: qual deveria ter sido a resposta.
reference = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS,
                           past_key_values=DynamicCache(config=model.config))
fresh_reply = tokenizer.decode(reference[0, input_length:], skip_special_tokens=True)

# %%
# NBVAL_CHECK_OUTPUT
stale = first_mismatch(cached_ids, prompts[1])  # kvlab: os ids fornecidos ao cache vs o prompt do turno 2
print("generate terminou sem erro; os ids em cache e os do prompt se "
      f"separam na posição {stale.position} de {stale.cached_tokens} em cache")
print("o cache recebeu:    ", repr(tokenizer.decode(cached_ids[stale.position - 5:stale.position + 12])))
print("turno 2 renderizado:", repr(tokenizer.decode(prompts[1][stale.position - 5:stale.position + 12])))
counts = alignment_counts(cached_ids, prompts[1])
print(f"posições iguais: {counts['match']}, diferentes: {counts['differ']}, novas: {counts['new']}")
display(score(guess_same_reply, stale_reply == fresh_reply, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
print("cache reutilizado (obsoleto):", repr(stale_reply))
print("cache novo:                  ", repr(fresh_reply))
print("mesma resposta:", stale_reply == fresh_reply)

# %%
plot_id_alignment(cached_ids, prompts[1], title="Turno 2: os ids que o cache guarda vs os ids do novo prompt")

# %% [markdown]
# Toda posição em vermelho está obsoleta: o modelo faz atenção sobre chaves e valores calculados para o
# bloco think e para o texto do turno 1 em posições deslocadas, e nada avisa você. `kvlab.measure.chat.ChatSession`
# guarda os ids com que alimentou o cache e os compara antes de gerar. Por padrão, ele recusa, indicando a posição e
# os dois tokens:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
strict = ChatSession(model, tokenizer, chat_template=THINK_DROPPING_TEMPLATE, max_new_tokens=NEW_TOKENS)
strict.ask(user_prompts[0])
strict.ask(user_prompts[1])

# %% [markdown]
# **Preveja primeiro.** `on_mismatch="crop"` recorta o cache de volta até a última posição coincidente
# (`past_key_values.crop(-n)`, notebook 07) e deixa `generate` pré-preencher o resto. Quantos tokens o turno 2 vai
# pré-preencher agora, e a resposta vai coincidir com a do cache novo (True ou False)?

# %%
guess_prefilled = None  # tokens que o turno 2 pré-preenche depois do recorte: seu palpite
guess_matches = None  # True se o turno 2 consertado dá a resposta do cache novo: seu palpite

# %%
# NBVAL_CHECK_OUTPUT
repaired = ChatSession(model, tokenizer, chat_template=THINK_DROPPING_TEMPLATE, on_mismatch="crop",
                       max_new_tokens=NEW_TOKENS)
repaired.ask(user_prompts[0])
turn = repaired.ask(user_prompts[1])
display(score(guess_prefilled, turn.prefilled_tokens, unit=" tokens", kind="count", label="pré-preenchidos:"))
display(score(guess_matches, turn.reply == fresh_reply, kind="choice", label="mesma resposta:"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"manteve {turn.reused_tokens} tokens em cache, recortou {turn.mismatch.cached_tokens - turn.mismatch.position}, "
      f"pré-preencheu {turn.prefilled_tokens} de {turn.prompt_tokens}")
print("mesma resposta que o cache novo:", turn.reply == fresh_reply)
print("recortes registrados no trace:", [c["n"] for c in repaired.cache.trace.crops])

# %% [markdown]
# ## Principais conclusões
#
# - Reutilizar um cache ao longo dos turnos custa um único argumento: crie um `DynamicCache` uma vez e passe-o como
#   `past_key_values=` ao `generate` de cada turno, com os ids da conversa inteira. Cada turno então pré-preenche só
#   o que é novo; as respostas são as mesmas que um cache novo dá.
# - A reutilização só é correta se os ids em cache forem um prefixo dos ids do novo prompt. Um template que remove ou
#   reescreve tokens de turnos anteriores (blocos think, espaços em branco, uma resposta que é retokenizada de outro
#   jeito) quebra isso **silenciosamente** no transformers puro.
# - Compare os ids com que o cache foi alimentado com o novo prompt antes de gerar
#   (`kvlab.measure.chat.first_mismatch`), ou deixe o `ChatSession` fazer isso: levantar um erro, avisar ou recortar
#   de volta até o prefixo comum.
#
# **A seguir:** [07 · Recorte e reversão](07_crop_and_rollback.ipynb): o que `crop` faz com cada tipo de camada, e um
# loop de decodificação especulativa que retira do cache os tokens rejeitados.
